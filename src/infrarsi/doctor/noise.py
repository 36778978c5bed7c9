"""Steady state and noise: warm-up detected from the data, spread within and between runs, and
the smallest speed-up that can be told from noise with n interleaved repeats.
"""

from __future__ import annotations

import math
import statistics

from infrarsi.trial.metrics import cv  # noqa: F401  (re-exported: the doctor's noise measure)

ALPHA = 0.05  # two-sided significance
POWER = 0.80
TARGET_EFFECT = 0.05  # the verifier should resolve a 5% speed-up
MAX_REPEATS = 10
# A patch under a throughput objective is timed by the harness's clock (``verify.clock``: the
# window from the first open of its files to the last change of the final parameters): over N
# steps its per-round noise is about sqrt(2) * sd(window) / (N * step). The Doctor picks N so that
# this is TIMED_TARGET_CV, but so that the steps of a timed run take at most TIMED_MAX_FACTOR
# times the baseline's whole launch to exit (Apply's cost), and never fewer than the
# contract's. Three runs say little of a spread: it is taken as at least E2E_SD_FLOOR_SHARE of
# the time outside the steps (start-up on these hosts moves by several percent run to run).
TIMED_TARGET_CV = 0.05
TIMED_MAX_FACTOR = 1.5
E2E_SD_FLOOR_SHARE = 0.03
METHOD = (
    "MDE = (t(1 - alpha/2, df) + t(power, df)) * sqrt(2/n) * cv_between, alpha 0.05, "
    "power 0.8, df = (Doctor runs - 1) + 2 (n - 1)"
)


def warmup_steps(step_times_s: list[float]) -> int:
    """Leading steps slower than the steady state: each above median + 4 MADs of the second half.

    Stops at the first step that is not, and always leaves at least half of the steps.
    """
    tail = step_times_s[len(step_times_s) // 2 :]
    median = statistics.median(tail)
    mad = statistics.median(abs(t - median) for t in tail)
    threshold = median + 4 * max(mad, 0.02 * median)
    count = 0
    for t in step_times_s[: len(step_times_s) // 2]:
        if t <= threshold:
            break
        count += 1
    return count


def min_detectable_effect(cv_between: float, repeats: int, runs_measured: int) -> float:
    """Relative difference of two means of ``repeats`` runs each that a two-sided t-test at
    ``ALPHA`` detects with ``POWER``, given a run-to-run coefficient of variation estimated
    from ``runs_measured`` runs (its degrees of freedom add to the comparison's own)."""
    from scipy import stats  # here: a command that decides nothing starts without scipy

    df = max(1, (runs_measured - 1) + 2 * (repeats - 1))
    t_sum = stats.t.ppf(1 - ALPHA / 2, df) + stats.t.ppf(POWER, df)
    return float(t_sum * math.sqrt(2 / repeats) * cv_between)


def apply_detectable_effect(cv_between: float, rounds: int, comparisons: int) -> float:
    """The speed-up (relative, like ``min_detectable_effect``) that Apply's decision promotes
    with ``POWER`` after ``rounds`` rounds, one of ``comparisons`` candidates. Apply reads each
    round as the candidate's log time against the mean of the baselines measured just before
    and after it, so neighbouring rounds share a baseline: the mean over n rounds has variance
    cv^2 (2n - 1/2) / n^2, while the t interval Apply forms from the rounds' own spread uses
    cv^2 (3/2) / n; its level is Bonferroni-split over the candidates, with n - 1 degrees of
    freedom. The sum is an effect in log time, returned as a ratio less one. Under normal
    noise a candidate this much faster beside two A/A candidates is promoted in ~80% of
    replays (``tests/apply/test_decide.py``); the single comparison of ``min_detectable_effect``
    promises that power and gives ~60% there."""
    from scipy import stats

    df = max(1, rounds - 1)
    t_level = float(stats.t.ppf(1 - ALPHA / (2 * max(1, comparisons)), df))
    t_power = float(stats.t.ppf(POWER, df))
    n = max(1, rounds)
    log_effect = (t_level * math.sqrt(1.5 / n) + t_power * math.sqrt(2 * n - 0.5) / n) * cv_between
    return math.expm1(log_effect)


def recommended_repeats(
    cv_between: float, runs_measured: int, target: float = TARGET_EFFECT
) -> int:
    """Fewest interleaved repeats whose minimum detectable effect is at most ``target``."""
    for n in range(1, MAX_REPEATS + 1):
        if min_detectable_effect(cv_between, n, runs_measured) <= target:
            return n
    return MAX_REPEATS


def outside_share(compared_s: list[float], steps_s: list[float]) -> float:
    """The share of the compared time spent outside the timed steps (start-up, compile,
    teardown), the mean over the baseline's runs: what no change to the training steps can
    remove. 0 where the compared time is the steps themselves (a throughput objective)."""
    shares = [max(0.0, 1.0 - s / c) for c, s in zip(compared_s, steps_s) if c > 0]
    return sum(shares) / len(shares) if shares else 0.0


def amdahl_bound(share: float) -> float | None:
    """The most a change confined to the timed steps can speed the compared time up (Amdahl:
    the steps made free leave the outside share): 1 / share; None (no bound) at share 0."""
    return None if share <= 0 else 1.0 / share


def gain_note(bound: float | None, share: float, mde: float, rounds: int) -> str:
    """What the objective can gain at this scale, as a sentence: the outside share, the
    Amdahl bound and the speed-up Apply's rounds detect."""
    detect = f"Apply's {rounds} rounds detect {1 + mde:.2f}x"
    if bound is None:
        return f"the compared time is the training steps themselves: no bound; {detect}"
    return (
        f"start-up and teardown are {share:.0%} of the compared time at this scale: a change "
        f"to the training steps can gain at most {bound:.2f}x; {detect}"
    )


def cannot_detect(bound: float | None, mde: float) -> bool:
    """Whether no change to the training steps can gain what Apply detects."""
    return bound is not None and bound < 1.0 + mde


def e2e_sd_floor(e2e_sd_s: float, outside_s: float) -> float:
    """The spread of launch to exit to plan with: the measured one, at least
    ``E2E_SD_FLOOR_SHARE`` of the time outside the steps."""
    return max(e2e_sd_s, E2E_SD_FLOOR_SHARE * outside_s)


def timed_steps(steps: int, step_s: float, e2e_s: float, e2e_sd_s: float) -> int:
    """The optimizer steps Apply times a patch over by launch to exit: enough that start-up's
    noise (``e2e_sd_s``, already floored) is ``TIMED_TARGET_CV`` of the steps' time, at most
    ``TIMED_MAX_FACTOR`` times the baseline's launch to exit of steps, at least ``steps``."""
    if step_s <= 0:
        return steps
    want = math.ceil(math.sqrt(2) * e2e_sd_s / (TIMED_TARGET_CV * step_s))
    cap = max(steps, math.floor(TIMED_MAX_FACTOR * e2e_s / step_s))
    return max(steps, min(want, cap))


def timed_cv(steps: int, step_s: float, e2e_sd_s: float, cv_between: float) -> float:
    """The per-round coefficient of variation of a patch's step by the harness's clock over
    ``steps`` steps: the two launch-to-exit times it differences, spread over the steps, and
    its reference's own steady step."""
    if steps < 1 or step_s <= 0:
        return cv_between
    return math.sqrt(2 * (e2e_sd_s / (steps * step_s)) ** 2 + cv_between**2)
