"""What the arrivals of a trial's lines say, by the harness's clock: where the run's time went
(before the first line, in the warm-up, in the steady steps, after the last line), and whether
the lines can have been written as the steps ended.

Every line a rank writes is the patched code's to shape (it runs in that process): it can hold
lines back and release them together, open the probe early, or do the run's work inside a
warm-up step. So arrivals never decide a promotion (``verify.clock`` does, from launch-to-exit
times); they are a cheap hint for the search, and a line pattern no honest run makes is refused
in any trial (``held_back``).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from infrarsi.records.trial import TrialMetrics, TrialRecord

# A step line seen less than this share of the step's reported time after the line before it
# was not written when its step ended: it was held back (an honest line trails its step by the
# print and the write, and the reader's scheduling moves two neighbours by a few ms at most).
HELD_SHARE = 0.1
# A steady median this far below the steady span over its steps: most steps took nothing and
# a few took everything (an honest run whose evaluations or checkpoints between steps cost nine
# of its steps each time stays above it)
FAR_BELOW_SHARE = 0.1
FAR_BELOW_STEPS = 8  # fewer steady steps than this: one slow step (an allocation) is no burst
# Lines of a script that reports no step time: a steady gap under this share of the median gap
# (or under the absolute floor) is two lines written together.
TOGETHER_SHARE, TOGETHER_FLOOR_S = 0.05, 0.001
BURST_SHARE = 0.5  # more than this share of the steady steps held back: refused
MIN_STEADY = 3  # fewer steady steps than this say nothing
# How late the harness's reader may see a line on a loaded machine (its thread scheduled late):
# a line is held back only when it arrived more than this before its step's reported time
# allows, and steady steps shorter than this on average carry no burst's time. CI saw a plain
# script's 1.5 ms steps read three at a time, 0.0 ms apart, on 2 busy cores; the reference
# workloads' tiny steps are 12-30 ms.
READER_JITTER_S = 0.005


def _far_below(m: TrialMetrics, seen: list[float]) -> str | None:
    """Why the steady median cannot be the run's steady step: far below the steady steps'
    own mean by the harness's clock (``FAR_BELOW_SHARE``)."""
    if len(seen) < FAR_BELOW_STEPS:
        return None
    mean = sum(seen) / len(seen)
    median = statistics.median(seen)
    if mean <= READER_JITTER_S or median >= FAR_BELOW_SHARE * mean:
        return None
    return (
        f"the steady steps' median gap was {median * 1e3:.2f} ms against their mean of "
        f"{mean * 1e3:.2f} ms: most step lines arrived together, a few carried the time"
    )


@dataclass(frozen=True)
class Arrivals:
    """A run's time by its lines' arrival (seconds, the harness's clock): launch to the start
    line (a probe's ``start``, a stdout script's first step line), the warm-up (start line to
    the last warm-up step's line), the steady span (from there to the last step line, over
    ``steady_steps`` steps) and the tail (last step line to exit)."""

    start_line_s: float
    warmup_s: float
    steady_span_s: float
    steady_steps: int
    tail_s: float

    @property
    def outside_steady_s(self) -> float:
        """Everything but the steady span: start-up, warm-up and tail."""
        return self.start_line_s + self.warmup_s + self.tail_s


def arrivals(m: TrialMetrics) -> Arrivals | None:
    """The run's arrival figures; None where the harness saw no span (no step line)."""
    if m.outside_train_span_s is None or m.harness_tail_s is None:
        return None
    gaps = list(m.harness_step_times_s)
    if len(gaps) != m.steps:
        return None
    span = m.outside_train_span_s
    start = m.e2e_time_s - m.harness_tail_s - span
    w = min(m.warmup_steps, max(0, m.steps - 1))
    # a stdout span starts at the first step line (its gap unknown): the warm-up runs from it
    warmup = sum(g for g in gaps[:w] if g is not None)
    return Arrivals(
        start_line_s=max(0.0, start),
        warmup_s=warmup,
        steady_span_s=max(0.0, span - warmup),
        steady_steps=m.steps - w,
        tail_s=m.harness_tail_s,
    )


def held_back(m: TrialMetrics) -> str | None:
    """Why the step lines cannot have been written as their steps ended (None: they can).

    With reported step times: more than half of the steady steps' lines arrived less than
    ``HELD_SHARE`` of the step's own reported time after the line before, and more than the
    reader's jitter (``READER_JITTER_S``) before that time allows — records held and sent in a
    burst. Without (a script that prints no time): more than half of the steady gaps are under
    ``TOGETHER_SHARE`` of their median, or under a millisecond (no time says how long the steps
    were: lines together are refused however short they claim to be)."""
    w = min(m.warmup_steps, max(0, m.steps - 1))
    seen = m.harness_step_times_s[w:]
    if len(m.harness_step_times_s) != m.steps or len(seen) < MIN_STEADY:
        return None
    reported: list[float | None] = (
        list(m.step_times_s[w:]) if len(m.step_times_s) == m.steps else [None] * len(seen)
    )
    known = [(s, r) for s, r in zip(seen, reported) if s is not None]
    if len(known) < MIN_STEADY:
        return None
    if any(r for _, r in known):
        held = [
            s for s, r in known if r is not None and s < HELD_SHARE * r and r - s > READER_JITTER_S
        ]
        what = f"less than {HELD_SHARE:.0%} of the step's own reported time after the line before"
    else:
        median = statistics.median(s for s, _ in known)
        floor = max(TOGETHER_FLOOR_S, TOGETHER_SHARE * median)
        held = [s for s, _ in known if s < floor]
        what = f"within {floor * 1e3:.1f} ms of the line before"
    if len(held) <= BURST_SHARE * len(known):
        return _far_below(m, [s for s, _ in known])
    return (
        f"{len(held)} of {len(known)} steady step lines arrived {what}: step records held "
        "back and released together, not written as their steps ended (a script that "
        "buffers its output: print with flush=True, or run Python unbuffered)"
    )


class Timing(BaseModel):
    """What a run of the workload's own code took by the harness's clock (seconds), or the
    median of several runs of one config with their spread: launch to exit, the steady step by
    its lines' arrivals (honest: no patch ran), the start line, the warm-up and the steady
    span; the steps it ran."""

    model_config = ConfigDict(frozen=True)
    steps: int
    e2e_s: float
    step_s: float
    start_line_s: float
    warmup_s: float
    steady_span_s: float
    outside_steady_s: float
    window_s: float = Field(
        0.0,
        description="the first open of a file a patch may touch to the last change of the "
        "final parameters (``window``)",
    )
    runs: int = 1
    e2e_sd_s: float = Field(0.0, description="spread of launch to exit between runs")
    window_sd_s: float = Field(0.0, description="spread of the window between runs")
    start_sd_s: float = 0.0
    warmup_sd_s: float = 0.0
    start_earliest_s: float | None = Field(None, description="the earliest of the runs' starts")
    start_latest_s: float | None = Field(None, description="the latest of the runs' starts")

    @property
    def start_range_s(self) -> tuple[float, float]:
        """The earliest and the latest start line of the runs (the median where a stored
        timing did not keep them)."""
        low = self.start_line_s if self.start_earliest_s is None else self.start_earliest_s
        high = self.start_line_s if self.start_latest_s is None else self.start_latest_s
        return low, high

    @classmethod
    def of(cls, records: Sequence[TrialRecord]) -> Timing | None:
        """The timing of one config's runs that ended ok with their lines timed (None when
        none did); medians, with the spread where there are two or more."""
        rows = []
        for record in records:
            m = record.metrics
            seen = arrivals(m) if m is not None else None
            step = m.harness_step_time_s if m is not None else None
            if m is not None and seen is not None and step:
                rows.append((m, seen, step))
        if not rows:
            return None

        def med(values: list[float]) -> float:
            return float(statistics.median(values))

        def sd(values: list[float]) -> float:
            return float(statistics.stdev(values)) if len(values) > 1 else 0.0

        e2e = [m.e2e_time_s for m, _, _ in rows]
        windows = [end - start for start, end in (window(m) for m, _, _ in rows)]
        start = [a.start_line_s for _, a, _ in rows]
        warm = [a.warmup_s for _, a, _ in rows]
        return cls(
            steps=rows[0][0].steps,
            e2e_s=med(e2e),
            step_s=med([s for _, _, s in rows]),
            start_line_s=med(start),
            warmup_s=med(warm),
            steady_span_s=med([a.steady_span_s for _, a, _ in rows]),
            outside_steady_s=med([a.outside_steady_s for _, a, _ in rows]),
            window_s=med(windows),
            runs=len(rows),
            e2e_sd_s=sd(e2e),
            window_sd_s=sd(windows),
            start_sd_s=sd(start),
            warmup_sd_s=sd(warm),
            start_earliest_s=min(start),
            start_latest_s=max(start),
        )

    def with_noise(self, e2e_sd_s: float, start_sd_s: float, warmup_sd_s: float) -> Timing:
        """This timing with at least the given spreads (a single run has none of its own)."""
        return self.model_copy(
            update={
                "e2e_sd_s": max(self.e2e_sd_s, e2e_sd_s),
                "start_sd_s": max(self.start_sd_s, start_sd_s),
                "warmup_sd_s": max(self.warmup_sd_s, warmup_sd_s),
            }
        )


def window(m: TrialMetrics, paths: Iterable[str] | None = None) -> tuple[float, float]:
    """(start, end), seconds from launch, of the window in which a patch can change what a run
    costs: from the first open of any of ``paths`` (None: of any file a patch may touch) to the
    last change of the final parameters as the kernel told the harness (``filewatch``), or the
    last step line's arrival where that came later (the training was not over before its last
    step); launch and exit where the kernel did not say."""
    wanted = None if paths is None else set(paths)
    opened = [t for p, t in m.first_open_s.items() if wanted is None or p in wanted]
    if m.final_saved_s is None:
        return (min(opened) if opened else 0.0), m.e2e_time_s
    last_line = m.e2e_time_s - m.harness_tail_s if m.harness_tail_s is not None else 0.0
    return (min(opened) if opened else 0.0), max(m.final_saved_s, last_line)


def paired_windows(
    cand: TrialMetrics, ref: TrialMetrics, paths: Iterable[str]
) -> tuple[float, float, str]:
    """(the candidate's window, the reference's, how they were bounded), seconds: both from
    the first open of the files the candidate's patch touches where both runs opened one (else
    both from launch), both to the last change of the final parameters where both wrote them
    (else both to exit) — two runs measured the same way."""
    paths = set(paths)
    opened = bool(paths & set(cand.first_open_s)) and bool(paths & set(ref.first_open_s))
    saved = cand.final_saved_s is not None and ref.final_saved_s is not None
    (cs, ce), (rs, re) = window(cand, paths), window(ref, paths)
    if not opened:
        cs = rs = 0.0
    if not saved:
        ce, re = cand.e2e_time_s, ref.e2e_time_s
    how = (
        f"{'the first open of the patched files' if opened else 'launch'} to "
        f"{'the last change of the final parameters' if saved else 'exit'}"
    )
    return ce - cs, re - rs, how
