"""Sorting a finished trial into exactly one status, with the evidence for it.

Order matters: a timeout is a timeout whatever else happened; an allocation failure anywhere
(reported by a rank's error hook, or seen in the output, even at import) is an ``oom``; any other
non-zero exit is a ``crash`` with the error's tail; a clean exit is measured, and becomes
``invalid`` when it computed something other than the workload (steps or tokens per step differ).
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from infrarsi.trial.metrics import (MetricsError, RankReport, cv, read_probe_files, reduce_ranks,
                                    steady_phases)
from infrarsi.trial.process import ProcessResult, near_cap
from infrarsi.trial.record import TrialMetrics, TrialStatus

if TYPE_CHECKING:
    from infrarsi.trial.runner import TrialSpec

OOM_PATTERNS = re.compile(
    r"DefaultCPUAllocator: can't allocate memory|CUDA out of memory|OutOfMemoryError|"
    r"\bMemoryError\b|std::bad_alloc|Cannot allocate memory|failed to map segment|"
    r"Memory allocation still failed",
    re.IGNORECASE)
TAIL_CHARS = 2000


@dataclass
class Outcome:
    """A status, the reason when it is not ``ok``, and the metrics when there are any."""
    status: TrialStatus
    error: str | None = None
    metrics: TrialMetrics | None = None
    warnings: list[str] = field(default_factory=list)


def outcome(result: ProcessResult, trial_dir: Path, spec: "TrialSpec") -> Outcome:
    """Status from how the processes ended: timeout, oom, crash, or ok (to be measured)."""
    output = _read(trial_dir / "stderr.log") + _read(trial_dir / "stdout.log")
    if result.timed_out:
        return Outcome(TrialStatus.TIMEOUT, f"no exit after {spec.effective_timeout_s:g} s; "
                       f"killed. Output tail:\n{_tail(output)}")
    rank_errors = _rank_errors(trial_dir)
    oom = [e for e in rank_errors if e.get("oom")]
    if oom:
        first = oom[0]
        return Outcome(TrialStatus.OOM, f"rank {first['rank']}: {first['type']}: "
                       f"{first['message'][-500:]}{_cap_note(spec)}")
    if result.stalled_at_cap:
        return Outcome(TrialStatus.OOM, f"{result.stalled_at_cap}; ended early")
    match = OOM_PATTERNS.search(output) if result.returncode else None
    if match:
        return Outcome(TrialStatus.OOM, f"{_line_around(output, match)}{_cap_note(spec)}")
    at_cap = _ranks_at_cap(result, spec.mem_cap_bytes)
    if result.returncode and at_cap:
        return Outcome(TrialStatus.OOM, f"{_crash_text(result, rank_errors, output)}"
                       f"\n(native failure with {at_cap} at the capacity of "
                       f"{spec.mem_cap_bytes} bytes per rank)")
    if result.returncode != 0 and not rank_errors and _every_rank_finished(trial_dir):
        return Outcome(TrialStatus.OK, warnings=[
            f"every rank wrote its last step and peak memory, then the job ended with "
            f"{_exit_text(result.returncode)} during shutdown ({_teardown_hint(output)}); "
            "the measurements are complete"])
    if result.returncode != 0:
        return Outcome(TrialStatus.CRASH, _crash_text(result, rank_errors, output))
    return Outcome(TrialStatus.OK)


def _every_rank_finished(trial_dir: Path) -> bool:
    """True when every rank of the world wrote the probe's end record."""
    try:
        reports = read_probe_files(list(trial_dir.glob("metrics.rank*.jsonl")))
    except MetricsError:
        return False
    world = reports[0].world_size if reports else 0
    ranks = sorted(r.rank for r in reports if r.end is not None)
    return world > 0 and ranks == list(range(world))


def _teardown_hint(output: str) -> str:
    if "terminate called without an active exception" in output:
        return "'terminate called without an active exception': a known gloo teardown race"
    return "no Python error was raised"


def measured(spec: "TrialSpec", reports: list[RankReport], result: ProcessResult) -> Outcome:
    """Metrics of a clean run, or ``invalid`` when steps or tokens per step differ."""
    reduced = reduce_ranks(reports)
    preset = spec.manifest.scale(spec.scale)
    steps_expected = int(preset.params["steps"])
    if len(reduced.step_times_s) != steps_expected:
        return Outcome(TrialStatus.INVALID, f"ran {len(reduced.step_times_s)} optimizer steps; "
                       f"the workload fixes {steps_expected}")
    tokens = spec.tokens_per_step()
    wrong = [t for t in reduced.tokens if t is not None and t != tokens]
    if wrong:
        return Outcome(TrialStatus.INVALID, f"tokens per optimizer step {wrong[0]}; the "
                       f"workload fixes {tokens}")
    return Outcome(TrialStatus.OK, metrics=_metrics(spec, reduced, result, tokens))


def _metrics(spec: "TrialSpec", reduced, result: ProcessResult, tokens: int) -> TrialMetrics:
    warmup = min(spec.manifest.scale(spec.scale).warmup_steps, len(reduced.step_times_s) - 1)
    steady = reduced.step_times_s[warmup:]
    step_time = statistics.median(steady)
    overhead = max(0.0, sum(reduced.step_times_s[:warmup]) - warmup * step_time)
    train_time = sum(reduced.step_times_s)
    phases = steady_phases(reduced.phases_s[warmup:])
    compile_on = str(spec.knobs.get("compile", "off")).lower() not in ("off", "false", "0")
    ranks = max(len(reduced.peak_mem_bytes), len(result.outside_peak_rss_bytes))
    outside = [result.outside_peak_rss_bytes.get(r, 0) for r in range(ranks)]
    return TrialMetrics(
        step_time_s=step_time, step_time_cv=cv(steady), e2e_time_s=result.wall_s,
        train_time_s=train_time, startup_time_s=max(0.0, result.wall_s - train_time),
        warmup_overhead_s=overhead, compile_time_s=overhead if compile_on else 0.0,
        tokens_per_step=tokens, tokens_per_s=tokens / step_time,
        peak_mem_bytes=_peaks(reduced.peak_mem_bytes, outside),
        peak_vm_data_bytes=reduced.peak_vm_data_bytes, outside_peak_rss_bytes=outside,
        outside_train_span_s=result.outside_train_span_s,
        loss=reduced.loss, step_times_s=reduced.step_times_s, phases_s=phases,
        unattributed_s=max(0.0, step_time - sum(phases.values())) if phases else 0.0,
        steps=len(reduced.step_times_s), warmup_steps=warmup, ranks=ranks)


def _peaks(reported: list[int], outside: list[int]) -> list[int]:
    """Per-rank peak: what the rank reported, or the harness's sample where it reported none."""
    reported = reported + [0] * (len(outside) - len(reported))
    return [rep if rep > 0 else out for rep, out in zip(reported, outside)]


def _ranks_at_cap(result: ProcessResult, cap: int | None) -> str:
    """Which ranks' sampled private memory reached the capacity, as text ('' when none)."""
    if cap is None:
        return ""
    ranks = [f"rank {r} ({b} bytes)" for r, b in sorted(result.outside_peak_data_bytes.items())
             if near_cap(b, cap)]
    return ", ".join(ranks)


def _rank_errors(trial_dir: Path) -> list[dict]:
    errors = []
    for path in sorted(trial_dir.glob("error.rank*.jsonl")):
        for line in _read(path).splitlines():
            try:
                errors.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return errors


def _exit_text(returncode: int | None) -> str:
    return f"signal {-returncode}" if returncode and returncode < 0 else f"exit code {returncode}"


def _crash_text(result: ProcessResult, rank_errors: list[dict], output: str) -> str:
    code = _exit_text(result.returncode)
    if result.failed_node is not None:
        code = f"node {result.failed_node}'s launcher ended with {code}; the other nodes were ended"
    if rank_errors:
        first = rank_errors[0]
        return f"{code}; rank {first['rank']}: {_tail(first['traceback'])}"
    return f"{code}. Output tail:\n{_tail(output)}"


def _cap_note(spec: "TrialSpec") -> str:
    if spec.mem_cap_bytes is None:
        return " (no capacity was set: the machine ran out of memory)"
    return f" (capacity {spec.mem_cap_bytes} bytes per rank)"


def _line_around(text: str, match: re.Match) -> str:
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start:end if end >= 0 else None].strip()[-500:]


def _tail(text: str) -> str:
    return text[-TAIL_CHARS:].strip()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
