"""Sorting a finished trial into exactly one status, with the evidence for it.

Order matters. A rank that ran out of memory is an ``oom`` whatever followed (its peers may
then hang until the timeout): the kernel recorded an OOM kill in the rank's memory cgroup, or
the rank raised an allocation error (PyTorch's allocator, ``MemoryError``, CUDA's OOM) — at
import, in process-group set-up or in a tensor allocation alike. Nothing else is an ``oom``.
Then a timeout is a timeout; any other non-zero exit is a ``crash`` with the error's tail; a
clean exit is measured, and becomes ``invalid`` when it computed something other than the
workload (steps or tokens per step differ).
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infrarsi.records.trial import TrialMetrics, TrialStatus
from infrarsi.sandbox.memcg import RankMemory
from infrarsi.sandbox.ownership import OUTLIVE_TAIL_S
from infrarsi.sandbox.process import ProcessResult
from infrarsi.trial.arrivals import held_back
from infrarsi.trial.metrics import (
    MetricsError,
    RankReport,
    Reduced,
    cv,
    read_probe_files,
    read_stdout,
    reduce_ranks,
    steady_phases,
)
from infrarsi.trial.watch import OutsideTiming
from infrarsi.workloads.stdout import StdoutMetrics

if TYPE_CHECKING:
    from infrarsi.trial.spec import TrialSpec

OOM_PATTERNS = re.compile(
    r"DefaultCPUAllocator: can't allocate memory|CUDA out of memory|OutOfMemoryError|"
    r"\bMemoryError\b|std::bad_alloc|Cannot allocate memory|failed to map segment|"
    r"Memory allocation still failed",
    re.IGNORECASE,
)
TAIL_CHARS = 2000


@dataclass
class Classified:
    """A status, the reason when it is not ``ok``, and the metrics when there are any."""

    status: TrialStatus
    error: str | None = None
    metrics: TrialMetrics | None = None
    warnings: list[str] = field(default_factory=list)


def outlived_reason(count: int) -> str:
    """Why a trial with processes that outlived its launcher is refused."""
    return (
        f"{count} process(es) of the trial were still alive {OUTLIVE_TAIL_S:g} s after its "
        "launcher exited (killed): the trial's work must end with its launch, where the "
        "harness times it; its evidence is not read"
    )


def outcome(
    result: ProcessResult,
    trial_dir: Path,
    spec: TrialSpec,
    memory: dict[int, RankMemory] | None = None,
) -> Classified:
    """Status from how the processes ended: oom, timeout, crash, or ok (to be measured)."""
    output = _read(trial_dir / "stderr.log") + _read(trial_dir / "stdout.log")
    rank_errors = _rank_errors(trial_dir)
    oom = _oom(result, spec, memory or {}, rank_errors, output)
    if oom is not None:
        return Classified(TrialStatus.OOM, oom)
    if result.outlived:
        return Classified(TrialStatus.INVALID, outlived_reason(result.outlived))
    if result.timed_out and spec.cut_after_s < spec.effective_timeout_s:
        return Classified(
            TrialStatus.SLOW,
            f"cut short after {spec.cut_after_s:.1f} s: slower "
            "than the search's bound (a multiple of the best config's time so "
            "far); its time is right-censored there",
        )
    if result.timed_out:
        return Classified(
            TrialStatus.TIMEOUT,
            f"no exit after {spec.effective_timeout_s:g} s; killed. Output tail:\n{_tail(output)}",
        )
    if result.returncode != 0 and not rank_errors and _every_rank_finished(trial_dir, spec):
        return Classified(
            TrialStatus.OK,
            warnings=[
                f"every step was reported, then the job ended with "
                f"{_exit_text(result.returncode)} during shutdown ({_teardown_hint(output)}); "
                "the measurements are complete"
            ],
        )
    if result.returncode != 0:
        return Classified(TrialStatus.CRASH, _crash_text(result, rank_errors, output))
    return Classified(TrialStatus.OK)


def _oom(
    result: ProcessResult,
    spec: TrialSpec,
    memory: dict[int, RankMemory],
    rank_errors: list[dict[str, Any]],
    output: str,
) -> str | None:
    """Why the trial is an ``oom``, or None when no rank ran out of memory."""
    killed = {rank: mem for rank, mem in memory.items() if mem.oom_kills}
    if killed and (result.returncode != 0 or result.timed_out):
        rank, mem = next(iter(killed.items()))
        return (
            f"rank {rank} ran out of memory: the kernel ended it when its memory reached "
            f"{mem.peak_bytes} bytes{_cap_note(spec)}"
        )
    errors = [e for e in rank_errors if e.get("oom")]
    if errors:
        first = errors[0]
        return f"rank {first['rank']}: {first['type']}: {first['message'][-500:]}{_cap_note(spec)}"
    match = OOM_PATTERNS.search(output) if result.returncode else None
    return f"{_line_around(output, match)}{_cap_note(spec)}" if match else None


def _every_rank_finished(trial_dir: Path, spec: TrialSpec) -> bool:
    """True when the job reported every step: each rank wrote the probe's end record, or rank
    0's stdout holds every step's line."""
    how = spec.manifest.launch.metrics
    try:
        if isinstance(how, StdoutMetrics):
            text = _read(trial_dir / "stdout.log")
            text += _read(trial_dir / "stderr.log") if how.read_stderr else ""
            steps = read_stdout(text, how)[0].steps
            return len(steps) == spec.manifest.launch.steps_printed(spec.steps_to_run)
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


def measured(
    spec: TrialSpec,
    reports: list[RankReport],
    result: ProcessResult,
    memory: dict[int, RankMemory] | None = None,
    timing: OutsideTiming | None = None,
) -> Classified:
    """Metrics of a clean run, or ``invalid`` when steps or tokens per step differ.
    ``timing``: what the harness's clock saw of the steps (its metrics channel's)."""
    reduced = reduce_ranks(reports)
    steps_expected = spec.manifest.launch.steps_printed(spec.steps_to_run)
    if len(reduced.step_times_s) != steps_expected:
        return Classified(
            TrialStatus.INVALID,
            f"ran {len(reduced.step_times_s)} optimizer steps; the workload fixes {steps_expected}",
        )
    tokens = spec.tokens_per_step()
    wrong = [t for t in reduced.tokens if t is not None and t != tokens]
    if wrong:
        return Classified(
            TrialStatus.INVALID,
            f"tokens per optimizer step {wrong[0]}; the workload fixes {tokens}",
        )
    too_long = [t for t in reduced.step_times_s if t > result.wall_s]
    if too_long:
        raise MetricsError(
            f"a reported step took {too_long[0]:g} s, longer than the whole trial "
            f"({result.wall_s:.1f} s): check the unit of the step-time pattern "
            "(e.g. unit: ms)"
        )
    peaks, source, warnings = _peaks(reports, reduced, result, memory)
    metrics = _metrics(spec, reduced, result, tokens, peaks, source, timing)
    held = held_back(metrics)
    if held is not None:
        return Classified(TrialStatus.INVALID, held, metrics=metrics, warnings=warnings)
    warnings += lagged(metrics)
    return Classified(TrialStatus.OK, metrics=metrics, warnings=warnings)


def lagged(m: TrialMetrics) -> list[str]:
    """The warning for steps whose lines the harness's reader took together (timed under half
    what the rank reported): those steps count as reported (``never_below``), said."""
    pairs = zip(m.harness_step_times_s, m.step_times_s)
    short = sum(1 for h, r in pairs if h is not None and h < 0.5 * r)
    if not short or len(m.harness_step_times_s) != len(m.step_times_s):
        return []
    return [
        f"{short} of {m.steps} steps' lines reached the harness together (its reader fell "
        "behind on a busy host): those steps are timed as the rank reported them"
    ]


def _metrics(
    spec: TrialSpec,
    reduced: Reduced,
    result: ProcessResult,
    tokens: int,
    peaks: list[int | None],
    source: str,
    timing: OutsideTiming | None,
) -> TrialMetrics:
    warmup = min(spec.manifest.scale(spec.scale).warmup_steps, len(reduced.step_times_s) - 1)
    steady = reduced.step_times_s[warmup:]
    step_time = statistics.median(steady)
    overhead = max(0.0, sum(reduced.step_times_s[:warmup]) - warmup * step_time)
    train_time = sum(reduced.step_times_s)
    phases = steady_phases(reduced.phases_s[warmup:])
    compile_on = str(spec.knobs.get("compile", "off")).lower() not in ("off", "false", "0")
    return TrialMetrics(
        step_time_s=step_time,
        step_time_cv=cv(steady),
        e2e_time_s=result.wall_s,
        train_time_s=train_time,
        startup_time_s=max(0.0, result.wall_s - train_time),
        warmup_overhead_s=overhead,
        compile_time_s=overhead if compile_on else 0.0,
        tokens_per_step=tokens,
        tokens_per_s=tokens / step_time,
        peak_mem_bytes=peaks,
        peak_mem_source=source,
        reported_peak_mem_bytes=reduced.reported_peak_mem_bytes,
        outside_peak_rss_bytes=[result.outside_peak_rss_bytes.get(r) for r in range(len(peaks))],
        outside_train_span_s=timing.span_s if timing else None,
        outside_span_steps=timing.steps if timing else None,
        harness_step_times_s=timing.step_times_s if timing else [],
        harness_step_time_s=_steady_median(
            never_below(timing.step_times_s, reduced.step_times_s)[warmup:]
        )
        if timing
        else None,
        harness_tail_s=result.wall_s - timing.last_step_at_s if timing else None,
        loss=reduced.loss,
        step_times_s=reduced.step_times_s,
        phases_s=phases,
        unattributed_s=statistics.fmean(steady) - sum(phases.values()) if phases else 0.0,
        steps=len(reduced.step_times_s),
        warmup_steps=warmup,
        ranks=len(peaks),
    )


def never_below(seen: list[float | None], reported: list[float]) -> list[float | None]:
    """Each step's time by the harness's clock, never below what the rank reported for it.
    A rank gains nothing by reporting a step longer than it was; a reader the busy host kept
    from its socket or pipe takes lines together and times a 2 ms step at 0.1 ms — a time
    no step took, which would be ranked as a 20x gain. (Lines held back on purpose are
    refused apart: ``arrivals.held_back``.)"""
    if len(seen) != len(reported):
        return list(seen)
    return [max(s, r) if s is not None else None for s, r in zip(seen, reported)]


def _steady_median(times: list[float | None]) -> float | None:
    known = [t for t in times if t is not None]
    return statistics.median(known) if known else None


def _peaks(
    reports: list[RankReport],
    reduced: Reduced,
    result: ProcessResult,
    memory: dict[int, RankMemory] | None,
) -> tuple[list[int | None], str, list[str]]:
    """Per-rank peak memory as the harness measured it, its source, and what is unknown.

    CUDA: the device's max reserved memory the rank reports (the capacity is the device's).
    CPU: the kernel's peak charge of the rank's memory cgroup; where no cgroup can be made,
    the peak RSS the harness sampled from outside. A rank whose peak is unknown is None.
    """
    world = max(
        [
            reports[0].world_size if reports else 1,
            len(reports),
            len(memory or {}),
            len(result.outside_peak_rss_bytes),
        ]
    )
    if reports and reports[0].device.startswith("cuda"):
        reported = reduced.reported_peak_mem_bytes
        peaks = [
            reported[r] if r < len(reported) and reported[r] > 0 else None for r in range(world)
        ]
        source = "cuda_max_reserved"
    elif memory is not None:
        peaks = [
            memory[r].peak_bytes if r in memory and memory[r].peak_bytes > 0 else None
            for r in range(world)
        ]
        source = "memcg"
    else:
        peaks = [result.outside_peak_rss_bytes.get(r) for r in range(world)]
        source = "rss_sampled"
    missing = [r for r, p in enumerate(peaks) if p is None]
    warnings = (
        [f"peak memory of rank(s) {missing} was not measured ({source}): recorded as null"]
        if missing
        else []
    )
    return peaks, source, warnings


def _rank_errors(trial_dir: Path) -> list[dict[str, Any]]:
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


def _crash_text(result: ProcessResult, rank_errors: list[dict[str, Any]], output: str) -> str:
    code = _exit_text(result.returncode)
    if result.failed_node is not None:
        code = f"node {result.failed_node}'s launcher ended with {code}; the other nodes were ended"
    if rank_errors:
        first = rank_errors[0]
        return f"{code}; rank {first['rank']}: {_tail(first['traceback'])}"
    return f"{code}. Output tail:\n{_tail(output)}"


def _cap_note(spec: TrialSpec) -> str:
    if spec.mem_cap_bytes is None:
        return " (no capacity was set: the machine ran out of memory)"
    return f" (capacity {spec.mem_cap_bytes} bytes per rank)"


def _line_around(text: str, match: re.Match[str]) -> str:
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start : end if end >= 0 else None].strip()[-500:]


def _tail(text: str) -> str:
    return text[-TAIL_CHARS:].strip()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
