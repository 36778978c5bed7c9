"""A throughput gain by a clock the patch cannot touch.

Patched code runs in the rank's process, so everything that process writes — its step records,
their timing, the line that opens the probe — is the patch's to shape: it can hold records
back and release them in a burst, open the probe early, rehearse the whole run inside a
warm-up step, or leave the work to a process beside the rank. What the harness alone owns is
what the kernel tells it: launch and exit, which processes exist, and two moments no code of
the trial can move (``trial.filewatch``) — the first open of a file the patch touches (its
code cannot run before Python reads it) and the last change of the final parameters (the
training is over). So the steady step time that decides a promotion of a patch is

    charged step of (K, P) = steady step of (K, no patch) + (W(K, P) - W(K, no patch)) / N

where W is that window and (K, no patch) — the same knobs without the patch, the baseline
when the patch keeps its knobs — ran the workload's own code (its lines are honest) in the
same round, at the same seed and the same N steps. Work the patch moves anywhere inside its
window (before the first step, into a warm-up step, into a process beside the rank, after the
last step line) is charged to its steps; a saving outside it (a faster tear-down) is not
credited; nothing the patch writes moves the figure. Its noise is that of the window (about
sqrt(2) * sd(W) / N per round), which is why Apply times its rounds over more steps than the
contract's (``timed_steps``, chosen by the Doctor from the measured noise). What can still be
credited to the steps without being a steady-state gain is a saving between the patch's first
open and the first step (the process group, the model's construction): ``docs/verification.md``
states the bound.

A knob's own effect is timed by arrivals: a config without a patch runs the workload's code.

A charge the window cannot have made is a refusal, never a fallback to the lines
(``Charged.impossible``): all the charged steps together below zero by more than two windows'
noise (a smoke's six 3 ms steps are shorter than the set-up's spread inside its window: one
window 0.13 s shorter than its baseline's on a loaded host), or a charged step below the
candidate's own lines by more than the window can have saved outside the steps (the
reference's time in its window outside its steady steps) and the window's noise, means the
window did not contain the run — each by more than the clock's resolution (``resolution_s``:
each moment is timed at the edge of the watch's read that delivered it, tens of milliseconds).
Where all the charged steps together are within that resolution of nothing, or below it by no
more than the noise (a smoke trial of seven 3 ms steps: its window 24 ms shorter than its
baseline's, charged -0.4 ms a step, was refused as impossible), the clock resolves no gain and
credits none (``Charged.unresolved``: the reference's step is compared).

Arrivals stay a hint for the search, where lines that cannot be real are refused
(``moved_work``): the steps claim a saving the harness's clock does not show, the start line
came earlier than the reference's by more than start-up's noise (judged against that
configuration's own start-ups: Apply measures the reference once more before refusing), the
start line came later or the warm-up grew by more than half of the steady steps' time (work
done before the steady steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infrarsi.contract import Contract, NoisePolicy
from infrarsi.records.trial import TrialMetrics, TrialRecord, TrialStatus
from infrarsi.trial.arrivals import Timing, arrivals, paired_windows, window
from infrarsi.trial.filewatch import POLL_S
from infrarsi.verify.reference import References

__all__ = [
    "Charged",
    "Timing",
    "charged",
    "charged_by_window",
    "charged_step_s",
    "compared_step_s",
    "judge",
    "moved_work",
    "start_reasons",
    "timing_of",
    "timing_reference",
]

# The steps may claim a saving launch to exit does not show by at most the largest of these:
# an absolute floor, a share of the reference's time outside its steady steps (start-up on a
# loaded host moves by that much between identical runs), a multiple of the measured noise of
# a difference of two launch-to-exit times.
CLAIM_SLACK_S, CLAIM_SLACK_SHARE, CLAIM_SLACK_SD = 1.0, 0.5, 5.0
# The start line may come earlier than the reference's by at most the largest of these.
START_SLACK_S, START_SLACK_SHARE, START_SLACK_SD = 1.0, 0.3, 5.0
# A configuration's own spread counts from this many runs on (else the Doctor's alone).
MIN_SPREAD_RUNS = 3
# The warm-up may grow past the reference's by at most the largest of these: half of the
# reference's steady span (a rehearsal of the run moves all of it), a floor, the noise.
WARMUP_SLACK_SHARE, WARMUP_SLACK_S, WARMUP_SLACK_SD = 0.5, 0.25, 5.0
# All the charged steps together may fall below zero by the clock's resolution and this many
# sds of a difference of two windows (the set-up inside a window moves between identical runs
# by more than a smoke's few short steps take): such a charge credits no gain (``unresolved``).
NEGATIVE_SLACK_SD = 3.0


@dataclass(frozen=True)
class Charged:
    """A patched candidate against the same knobs without the patch, by the harness's clock:
    each run's window (``arrivals.paired_windows``: the first open of the patched files to the
    last change of the final parameters), how it was bounded, the candidate's steady step
    charged with the difference, what its own lines say, and how far below its lines the
    charge can honestly fall (``room_s`` over the steps: what the window can have saved
    outside the steady steps, and its noise)."""

    cand_window_s: float
    ref_window_s: float
    bounded: str
    step_s: float
    steps: int
    lines_s: float = 0.0
    room_s: float = 0.0
    resolution_s: float = 0.0
    ref_step_s: float = 0.0
    noise_s: float = 0.0

    @property
    def unresolved(self) -> bool:
        """Whether the charged steps are within the clock's resolution of nothing: the two
        windows' difference is then the watch's reads, not the steps (``resolution_s``)."""
        return self.step_s * self.steps <= self.resolution_s

    @property
    def impossible(self) -> str | None:
        """Why this charge cannot be the run's (None: it can): all its steps below zero by more
        than the windows' noise (``noise_s``: a smoke's few steps of a few milliseconds are
        shorter than the set-up's spread inside the window), or below the candidate's own lines
        by more than ``room_s`` over the steps — the window did not contain the run (its end
        moved before the training's, or its start after it) — each by more than the clock's
        resolution (``resolution_s``: the watch's reads). A negative charge that is possible
        credits no gain (``unresolved``)."""
        below = (self.lines_s - self.step_s) * self.steps
        floor_s = -(self.resolution_s + self.noise_s)
        if self.step_s * self.steps >= floor_s and below <= (self.room_s + self.resolution_s):
            return None
        return (
            f"the harness's clock charges {self.step_s:.4f} s a step, the candidate's own lines "
            f"say {self.lines_s:.4f} s: its window ({self.cand_window_s:.2f} s against "
            f"{self.ref_window_s:.2f} s) shows {self.ref_window_s - self.cand_window_s:.2f} s "
            f"saved, {below:.2f} s more than its steps do (allowed {self.room_s:.2f} s: what the "
            "window can save outside the steps, and its noise), all its steps together "
            f"{self.step_s * self.steps:.2f} s (allowed down to {floor_s:.2f} s: the watch's "
            "reads and the windows' noise): the window did not contain the run"
        )

    @property
    def compared_s(self) -> float | None:
        """What Apply compares: the charged step, or the lines' where those are slower (the
        clock bounds what the lines can claim; the lines bound what a one-time saving inside
        the window is credited as); None where the charge is impossible; no gain at all (the
        reference's step, or the lines' where slower) where the charge is unresolved."""
        return None if self.impossible else max(self.credited_step_s, self.lines_s)

    @property
    def credited_step_s(self) -> float:
        """The step the clock credits: the charge, or the reference's where the charge is
        unresolved (no gain the clock cannot resolve)."""
        return max(self.step_s, self.ref_step_s) if self.unresolved else self.step_s


def charged(
    cand: TrialMetrics,
    ref: TrialMetrics,
    ref_step_s: float,
    paths: list[str],
    timing: Timing | None = None,
) -> Charged:
    """The candidate's steady step by the harness's clock: the reference's steady step (by its
    lines: no patch ran there) plus the difference of their windows over the steps. Work the
    patch moves anywhere inside the window — before the first step, into a warm-up step, into a
    process beside the rank — is charged to its steps; nothing its process writes moves it.
    ``timing`` (the reference's, with its noise) sets how far below the candidate's lines the
    charge may fall."""
    mine, theirs, how = paired_windows(cand, ref, paths)
    return _charge(cand, mine, theirs, how, ref_step_s, timing, ref.watch_lag_s)


def charged_by_window(cand: TrialMetrics, timing: Timing) -> Charged | None:
    """The candidate charged by its window against the median window of other runs
    (``timing``: the search's screen, against the Doctor's baseline runs at other seeds), each
    from the first open of any file a patch may touch; None where the step counts differ or
    the timing kept no window."""
    if cand.steps != timing.steps or cand.steps < 1 or not timing.window_s:
        return None
    start, end = window(cand)
    how = "the first open of a file a patch may touch to the end of the training (the Doctor's)"
    return _charge(cand, end - start, timing.window_s, how, timing.step_s, timing)


def _charge(
    cand: TrialMetrics,
    mine: float,
    theirs: float,
    how: str,
    ref_step_s: float,
    timing: Timing | None,
    ref_lag_s: float | None = None,
) -> Charged:
    room = noise = 0.0
    if timing is not None:
        room = max(0.0, theirs - timing.steady_span_s)
        room += CLAIM_SLACK_SD * math.sqrt(2) * timing.window_sd_s
        # a window's spread, or launch to exit's where one run gave none (it holds the window)
        sd = max(timing.window_sd_s, timing.e2e_sd_s)
        noise = NEGATIVE_SLACK_SD * math.sqrt(2) * sd
    return Charged(
        mine,
        theirs,
        how,
        ref_step_s + (mine - theirs) / cand.steps,
        cand.steps,
        lines_s=cand.harness_step_time_s or 0.0,
        room_s=room,
        resolution_s=resolution_s(cand.watch_lag_s, ref_lag_s),
        ref_step_s=ref_step_s,
        noise_s=noise,
    )


def resolution_s(*lags: float | None) -> float:
    """How far apart two windows' difference can be put by the watch's reads alone: each
    window's two moments are timed at the edges of the reads that delivered them
    (``trial.filewatch``), each read at most the run's largest interval between reads
    (``watch_lag_s``), and no less than the reader's poll; two moments per window."""
    return sum(2 * max(lag or 0.0, POLL_S) for lag in lags)


def charged_step_s(cand: TrialMetrics, ref: TrialMetrics, paths: list[str]) -> float | None:
    """``charged``'s step (None when the two ran other step counts or the reference's lines
    gave no steady step)."""
    step = ref.harness_step_time_s
    if cand.steps != ref.steps or cand.steps < 1 or not step:
        return None
    return charged(cand, ref, step, paths).step_s


def timing_of(noise: NoisePolicy, runs: list[TrialRecord | None]) -> Timing | None:
    """The timing of one configuration's runs (None where none was timed), its spreads the
    Doctor's (``noise``) or, from ``MIN_SPREAD_RUNS`` runs on, the larger of those and its
    own: two runs' spread is one difference, too loose a yardstick to multiply (their range,
    ``Timing.start_range_s``, is what the start line is judged against)."""
    timing = Timing.of([r for r in runs if r is not None])
    if timing is None:
        return None
    if timing.runs < MIN_SPREAD_RUNS:
        timing = timing.model_copy(
            update={"e2e_sd_s": 0.0, "window_sd_s": 0.0, "start_sd_s": 0.0, "warmup_sd_s": 0.0}
        )
    return timing.with_noise(
        noise.e2e_sd_s or 0.0, noise.start_sd_s or 0.0, noise.warmup_sd_s or 0.0
    )


def bill(candidate: TrialRecord, ref_run: TrialRecord, timing: Timing) -> Charged | None:
    """The candidate's charge against ``ref_run`` (the same knobs without its patch, in its
    round) whose configuration's timing is ``timing``; None where the two ran other step
    counts or either has no metrics."""
    m, r = candidate.metrics, ref_run.metrics
    if m is None or r is None or m.steps != r.steps or m.steps < 1:
        return None
    paths = sorted({p for patch in candidate.patches for p in patch.paths})
    return charged(m, r, timing.step_s, paths, timing)


def compared_step_s(
    candidate: TrialRecord, timed_by: TrialRecord | None, noise: NoisePolicy
) -> float | None:
    """A patched candidate's steady step as Apply compares it (``Charged.compared_s``): None
    when it did not end ok, the run it is timed against or its timing is missing, or the
    charge is impossible (a refusal: ``judge`` says why)."""
    if candidate.status is not TrialStatus.OK or timed_by is None:
        return None
    timing = timing_of(noise, [timed_by])
    charge = bill(candidate, timed_by, timing) if timing is not None else None
    return charge.compared_s if charge is not None else None


def claim_slack_s(ref: Timing, windowed: bool = False) -> float:
    """How much more saving the steps may claim than the harness's clock shows: at least
    ``CLAIM_SLACK_S``, a share of the reference's time outside its steady steps (of its window,
    ``windowed``, where that is what is shown; start-up on a loaded host moves by that much
    between identical runs) and a multiple of the measured spread."""
    outside = ref.window_s - ref.steady_span_s if windowed else ref.outside_steady_s
    return max(
        CLAIM_SLACK_S,
        CLAIM_SLACK_SHARE * max(0.0, outside),
        CLAIM_SLACK_SD * math.sqrt(2) * max(ref.e2e_sd_s, ref.window_sd_s),
    )


def unshown_saving(cand: TrialMetrics, ref: Timing, shown_s: float | None = None) -> str | None:
    """Why the steps' claimed saving is not real: the time per step the arrivals say was saved,
    times the steps, does not appear by the harness's clock (``shown_s``: the reference's
    window less the candidate's; by default launch to exit) within ``claim_slack_s``."""
    step = cand.harness_step_time_s
    if step is None or cand.steps != ref.steps:
        return None
    claimed = (ref.step_s - step) * cand.steps
    shown = ref.e2e_s - cand.e2e_time_s if shown_s is None else shown_s
    allowed = claim_slack_s(ref, windowed=shown_s is not None)
    if claimed - shown <= allowed:
        return None
    more = f"{-shown:.2f} s more" if shown < 0 else f"{shown:.2f} s saved"
    clock = "launch to exit" if shown_s is None else "the harness's clock"
    return (
        f"the steps claim {claimed:.2f} s saved over {cand.steps} steps, {clock} shows "
        f"{more} (allowed {allowed:.2f} s apart): work moved out of the timed steps, or step "
        "lines that were not written as the steps ended"
    )


def early_start(cand: TrialMetrics, ref: Timing) -> str | None:
    """Why the start line cannot be trusted: it came earlier than the reference's earliest
    by more than start-up's noise (a probe opened before the workload's own start)."""
    seen = arrivals(cand)
    if seen is None:
        return None
    earliest = ref.start_range_s[0]
    allowed = max(START_SLACK_S, START_SLACK_SHARE * earliest, START_SLACK_SD * ref.start_sd_s)
    if earliest - seen.start_line_s <= allowed:
        return None
    return (
        f"the first line arrived {seen.start_line_s:.2f} s after launch, the reference's "
        f"{_starts(ref)} (allowed {allowed:.2f} s earlier): a probe opened before the "
        "workload's own start"
    )


def late_start(cand: TrialMetrics, ref: Timing) -> str | None:
    """Why the steps cannot be trusted: the start line came later than the reference's latest
    by more than the warm-up may grow (half of the reference's steady steps' time, a floor,
    the start-up's noise) — the run's work done before its steps began."""
    seen = arrivals(cand)
    if seen is None:
        return None
    latest = ref.start_range_s[1]
    allowed = max(
        WARMUP_SLACK_SHARE * ref.steady_span_s, WARMUP_SLACK_S, START_SLACK_SD * ref.start_sd_s
    )
    if seen.start_line_s - latest <= allowed:
        return None
    return (
        f"the first line arrived {seen.start_line_s:.2f} s after launch, the reference's "
        f"{_starts(ref)} (allowed {allowed:.2f} s later, half of its steady steps' "
        f"{ref.steady_span_s:.2f} s): the run's work done before its steps began"
    )


def _starts(ref: Timing) -> str:
    low, high = ref.start_range_s
    if ref.runs < 2:
        return f"{low:.2f} s"
    return f"{low:.2f}-{high:.2f} s over {ref.runs} runs"


def start_reasons(cand: TrialMetrics, ref: Timing) -> list[str]:
    """Why the candidate's start line cannot be trusted against the reference: earlier, or
    later, than start-up's noise allows."""
    return [r for r in (early_start(cand, ref), late_start(cand, ref)) if r is not None]


def grown_warmup(cand: TrialMetrics, ref: Timing) -> str | None:
    """Why the steady steps cannot be trusted: the warm-up grew past the reference's by more
    than half of the reference's steady steps' time (and their noise) — the run's work done
    inside a warm-up step."""
    seen = arrivals(cand)
    if seen is None:
        return None
    allowed = max(
        WARMUP_SLACK_SHARE * ref.steady_span_s, WARMUP_SLACK_S, WARMUP_SLACK_SD * ref.warmup_sd_s
    )
    if seen.warmup_s - ref.warmup_s <= allowed:
        return None
    return (
        f"the warm-up took {seen.warmup_s:.2f} s, the reference's {ref.warmup_s:.2f} s (allowed "
        f"{allowed:.2f} s more, half of its steady steps' {ref.steady_span_s:.2f} s): the run's "
        "work done inside a warm-up step, or a one-time cost (compilation) that a throughput "
        "objective does not judge: an end-to-end objective does"
    )


def moved_work(
    cand: TrialMetrics,
    ref: Timing,
    one_time: bool = True,
    shown_s: float | None = None,
    late: bool = True,
) -> list[str]:
    """Every reason the candidate's arrivals cannot be what a throughput objective compares,
    against a reference of the same knobs without the patch (or the Doctor's baseline): an
    early start line, and (``one_time``: the reference runs the same one-time work, so a
    growth of it is the candidate's) a late one, a claimed saving the harness's clock does not
    show (``shown_s``: what it shows; launch to exit by default) and a grown warm-up; ``late``
    False leaves a late start line to the window (the search's short runs)."""
    found = [early_start(cand, ref)]
    if one_time:
        found += [
            late_start(cand, ref) if late else None,
            unshown_saving(cand, ref, shown_s),
            grown_warmup(cand, ref),
        ]
    return [reason for reason in found if reason is not None]


def timing_reference(
    baseline: TrialRecord, candidate: TrialRecord, refs: References
) -> TrialRecord | None:
    """The run a patched candidate's throughput is timed against: the same knobs without the
    patch — the baseline when the knobs are the baseline's, else the reference run of them."""
    if baseline.configuration.same_knobs(candidate.configuration):
        return baseline
    return refs.same_knobs


def judge(
    contract: Contract, baseline: TrialRecord, candidate: TrialRecord, refs: References
) -> tuple[list[str], list[str]]:
    """(reasons, comparisons made) of a patched candidate's time under a throughput objective,
    against the same knobs without the patch (``clock``): its charge must be possible, its
    steps' claimed saving must show in its window, its start line may come neither early nor
    late (against that configuration's start-ups: the reference, and its start-up measured
    again where Apply did so before refusing), its warm-up may not swallow the steps. A
    candidate without a patch runs the workload's own code: its lines are honest."""
    if contract.objective == "e2e_time" or not candidate.patches or candidate.metrics is None:
        return [], []
    ref_run = timing_reference(baseline, candidate, refs)
    if ref_run is None:
        return [
            "a patch's throughput is timed against the same knobs without it (launch to "
            "exit), and that run was not measured"
        ], []
    timing = timing_of(contract.noise, [ref_run, refs.start_again])
    if timing is None or ref_run.metrics is None:
        return [f"the same knobs without the patch ({ref_run.trial_id}) have no timed run"], []
    if ref_run.metrics.steps != candidate.metrics.steps:
        return [
            f"ran {candidate.metrics.steps} steps, the same knobs without the patch "
            f"{ref_run.metrics.steps}: a throughput is timed at one step count"
        ], []
    charge = bill(candidate, ref_run, timing)
    assert charge is not None  # both ran ok with metrics at one step count
    lag = max(candidate.metrics.watch_lag_s or 0.0, ref_run.metrics.watch_lag_s or 0.0)
    again = (
        f"; its start-up measured again: {refs.start_again.trial_id}" if refs.start_again else ""
    )
    ran = [
        f"harness clock: {charge.bounded}, {charge.cand_window_s:.2f} s against "
        f"{ref_run.trial_id}'s {charge.ref_window_s:.2f} s over {charge.steps} steps (charged "
        f"step {charge.step_s:.4f} s; its lines say {charge.lines_s:.4f} s; the watch's "
        f"moments timed within {lag * 1e3:.0f} ms{again})"
    ]
    shown = charge.ref_window_s - charge.cand_window_s
    reasons = moved_work(candidate.metrics, timing, shown_s=shown)
    return reasons + ([charge.impossible] if charge.impossible else []), ran
