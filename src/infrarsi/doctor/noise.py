"""Steady state and noise: warm-up detected from the data, spread within and between runs, and
the smallest speed-up that can be told from noise with n interleaved repeats.
"""

from __future__ import annotations

import math
import statistics

from scipy import stats

from infrarsi.trial.metrics import cv  # noqa: F401  (re-exported: the doctor's noise measure)

ALPHA = 0.05  # two-sided significance
POWER = 0.80
TARGET_EFFECT = 0.05  # the verifier should resolve a 5% speed-up
MAX_REPEATS = 10
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
    df = max(1, (runs_measured - 1) + 2 * (repeats - 1))
    t_sum = stats.t.ppf(1 - ALPHA / 2, df) + stats.t.ppf(POWER, df)
    return float(t_sum * math.sqrt(2 / repeats) * cv_between)


def recommended_repeats(
    cv_between: float, runs_measured: int, target: float = TARGET_EFFECT
) -> int:
    """Fewest interleaved repeats whose minimum detectable effect is at most ``target``."""
    for n in range(1, MAX_REPEATS + 1):
        if min_detectable_effect(cv_between, n, runs_measured) <= target:
            return n
    return MAX_REPEATS
