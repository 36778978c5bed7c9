"""Reading what a trial's ranks reported, and reducing it to the trial's metrics.

Two sources: the probe's JSON lines (one file per rank) or, for scripts that cannot be edited,
regexes over rank 0's stdout. Whatever is missing or inconsistent raises MetricsError with a
sentence a person can act on; the runner turns it into the trial's status.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infrarsi.workloads.stdout import StdoutMetrics, StdoutPattern


class MetricsError(ValueError):
    """The ranks' reports are missing, truncated or inconsistent."""


@dataclass
class RankReport:
    """One rank's steps (in order) and its end-of-run memory figures."""

    rank: int
    world_size: int = 1
    device: str = "cpu"
    steps: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None


def read_probe_files(paths: list[Path]) -> list[RankReport]:
    """Parse each rank's JSON-lines file written by ``infrarsi.probe``."""
    reports = []
    for path in sorted(paths):
        report = RankReport(rank=-1)
        for n, line in enumerate(path.read_text().splitlines(), 1):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                raise MetricsError(f"{path.name} line {n} is not JSON: {line[:80]!r}") from None
            if entry.get("kind") == "start":
                report.rank = int(entry["rank"])
                report.world_size = int(entry.get("world_size", 1))
                report.device = str(entry.get("device", "cpu"))
            elif entry.get("kind") == "step":
                report.steps.append(entry)
            elif entry.get("kind") == "end":
                report.end = entry
        reports.append(report)
    return sorted(reports, key=lambda r: r.rank)


def read_stdout(
    text: str, spec: StdoutMetrics, arrivals_s: list[float] | None = None
) -> list[RankReport]:
    """Steps read from rank 0's stdout by the manifest's regexes, numbers in their stated units;
    a manifest with no step-time pattern times each step by its line's arrival (``arrivals_s``,
    seconds by the harness's clock; without them, as when only counting steps, no time)."""
    losses = _numbers(text, spec.loss)
    times = (
        _numbers(text, spec.step_time)
        if spec.step_time is not None
        else by_arrival(arrivals_s, len(losses))
    )
    if len(times) != len(losses):
        raise MetricsError(
            f"stdout patterns found {len(times)} step times and {len(losses)} "
            "losses; each step must print both"
        )
    tokens = _numbers(text, spec.tokens_per_step) if spec.tokens_per_step else []
    if len(tokens) == 1:  # printed once at start-up, as most scripts do
        tokens = tokens * len(times)
    if tokens and len(tokens) != len(times):
        raise MetricsError(
            f"stdout patterns found {len(tokens)} tokens-per-step values for "
            f"{len(times)} steps; print it once, once per step, or not at all"
        )
    counts: list[int | None] = [int(t) for t in tokens] or [None] * len(times)
    steps: list[dict[str, Any]] = [
        {"step": i, "step_time_s": t, "loss": loss, "tokens": n, "phases_s": {}}
        for i, (t, loss, n) in enumerate(zip(times, losses, counts))
    ]
    return [RankReport(rank=0, steps=steps, end={})]


# below this median gap between step lines, arrival times say more about the reader's
# scheduling than about the steps (lines already in the pipe are read together)
ARRIVAL_FLOOR_S = 0.005


def by_arrival(arrivals_s: list[float] | None, steps: int) -> list[float]:
    """Each step's time from the arrivals of its line: the gap since the previous step line;
    the first step, whose start no line marks, as long as the median of the others (its warm-up
    is then counted outside the steps, as start-up is). Zeros when the arrivals are unknown."""
    if arrivals_s is None:
        return [0.0] * steps
    if len(arrivals_s) != steps:
        raise MetricsError(
            f"{len(arrivals_s)} step lines arrived for {steps} losses; the loss pattern must "
            "match one line per step"
        )
    gaps = [b - a for a, b in zip(arrivals_s, arrivals_s[1:])]
    if gaps and statistics.median(gaps) < ARRIVAL_FLOOR_S:
        raise MetricsError(
            f"the step lines arrived a median {statistics.median(gaps) * 1e3:.1f} ms apart: "
            "steps this short cannot be timed by their lines' arrival (a busy reader takes "
            "several at once); print each step's time on its line and give its pattern"
        )
    return [statistics.median(gaps) if gaps else 0.0, *gaps][:steps]


def _numbers(text: str, pattern: StdoutPattern) -> list[float]:
    factor = pattern.scale_to_base()
    out = []
    for match in re.findall(pattern.pattern, text):
        try:
            out.append(float(match.replace(",", "")) * factor)  # 491,520: thousands
        except ValueError:
            raise MetricsError(
                f"pattern {pattern.pattern!r} captured {match!r}, not a number"
            ) from None
    return out


@dataclass
class Reduced:
    """Per-step values over ranks: the slowest rank's time and phases, mean loss, tokens; and
    what each rank reported of its memory."""

    step_times_s: list[float]
    loss: list[float]
    tokens: list[int | None]
    phases_s: list[dict[str, float]]
    reported_peak_mem_bytes: list[int]


def reduce_ranks(reports: list[RankReport]) -> Reduced:
    """Combine the ranks' reports step by step; MetricsError when ranks are missing or disagree."""
    if not reports or not reports[0].steps:
        raise MetricsError("the workload exited but reported no step")
    world = reports[0].world_size
    if sorted(r.rank for r in reports) != list(range(world)):
        raise MetricsError(
            f"ranks {sorted(r.rank for r in reports)} reported metrics; "
            f"a world of {world} was started"
        )
    counts = {len(r.steps) for r in reports}
    if len(counts) != 1:
        raise MetricsError(f"ranks reported different numbers of steps: {sorted(counts)}")
    per_step = list(zip(*(r.steps for r in reports)))
    for i, step in enumerate(per_step):
        if any(s.get("loss") is None for s in step):
            raise MetricsError(
                f"step {i} reported no loss: no scalar reached backward in it (the observer "
                "reads the loss there); a script whose loss is not a scalar needs its loss "
                "lines read instead (launch.metrics: the stdout patterns)"
            )
    losses = [statistics.fmean(s["loss"] for s in step) for step in per_step]
    for i, value in enumerate(losses):
        if not math.isfinite(value):
            raise MetricsError(f"the loss is not finite at step {i}: {value}")
    return Reduced(
        step_times_s=[max(s["step_time_s"] for s in step) for step in per_step],
        loss=losses,
        tokens=[step[0].get("tokens") for step in per_step],
        phases_s=[critical(step).get("phases_s", {}) for step in per_step],
        reported_peak_mem_bytes=[int((r.end or {}).get("peak_mem_bytes", 0)) for r in reports],
    )


def critical(step: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """The slowest rank's entry of one step: the step's time is its time, so its phases are
    the ones that add up to the step."""
    return max(step, key=lambda s: s["step_time_s"])


def steady_phases(phases: list[dict[str, float]]) -> dict[str, float]:
    """Mean seconds per step of each phase over the given (steady-state) steps."""
    names = sorted({n for p in phases for n in p})
    return {n: statistics.fmean(p.get(n, 0.0) for p in phases) for n in names} if phases else {}


def cv(values: list[float]) -> float:
    """Coefficient of variation (sample standard deviation over mean); 0 for fewer than 2."""
    if len(values) < 2 or statistics.fmean(values) == 0:
        return 0.0
    return statistics.stdev(values) / statistics.fmean(values)
