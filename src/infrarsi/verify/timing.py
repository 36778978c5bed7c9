"""Do the step times a job reports agree with the time the harness saw pass? The harness times
each step line on arrival and the whole reported span from outside the job (``trial.watch``);
a candidate whose reported times add up to less, step by step or in total, or whose training
goes on after its last reported step, timed itself faster than it ran."""

from __future__ import annotations

from infrarsi.records.trial import TrialMetrics
from infrarsi.trial.watch import POLL_S

# The harness times each line on arrival (its reader thread may be scheduled a little late on a
# loaded machine); the loop does a little work outside its measured steps (a print,
# loss.item()). A span's error is at its two ends only, so the total is held tighter than a
# single step, relative first: a clock slowed to 0.8x fails the total at tiny scale.
TIMING_SLACK_FRACTION = 0.10
TIMING_SLACK_S = 2 * POLL_S + 0.03  # per step
SPAN_SLACK_S = 0.03  # over the whole span
READER_LATE_PER = 100  # steps per step a late reader may show long (at least one per run)
TAIL_S = 10.0  # saving the final parameters and tearing down take a few seconds at most


def reported_vs_seen(m: TrialMetrics) -> list[str]:
    """Reported step times against the harness's clock: in total, and step by step; the
    reasons they disagree (none: they agree)."""
    if m.outside_train_span_s is None:
        return ["no outside timing of the training was recorded"]
    covered = m.step_times_s[len(m.step_times_s) - (m.outside_span_steps or m.steps) :]
    reported = sum(covered)
    floor = m.outside_train_span_s * (1 - TIMING_SLACK_FRACTION) - SPAN_SLACK_S
    if reported < floor:
        return [
            f"reported step times add up to {reported:.3f} s but the harness saw the "
            f"training take {m.outside_train_span_s:.3f} s: a faked timer or forged metrics"
        ]
    return _per_step(m) + _tail(m, m.outside_train_span_s)


def _tail(m: TrialMetrics, span_s: float) -> list[str]:
    """Training that goes on after the last step was reported: step lines written ahead
    (``span_s``: how long the harness saw the reported training take)."""
    tail_s = m.harness_tail_s
    if tail_s is None or tail_s <= max(TAIL_S, span_s):
        return []
    return [
        f"the job ran {tail_s:.1f} s after its last step was reported (the reported training "
        f"took {span_s:.1f} s): steps reported ahead of the work"
    ]


def _per_step(m: TrialMetrics) -> list[str]:
    """Steps reported shorter than the harness saw them take. A reader the machine scheduled
    late sees one step long (and the next short): over a long timed run that happens once in a
    while, so one such step in a hundred (at least one) is the reader's, not the run's."""
    seen = m.harness_step_times_s
    if not seen or len(seen) != len(m.step_times_s):
        return []
    short = [
        i
        for i, (got, saw) in enumerate(zip(m.step_times_s, seen))
        if saw is not None and got < saw * (1 - TIMING_SLACK_FRACTION) - TIMING_SLACK_S
    ]
    if len(short) > max(1, len(seen) // READER_LATE_PER):
        i = short[0]
        return [
            f"step {i} reported {m.step_times_s[i]:.3f} s but the harness saw it take "
            f"{seen[i]:.3f} s ({len(short)} such step(s)): time moved between steps or a "
            "slowed clock"
        ]
    return []
