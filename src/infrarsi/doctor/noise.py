"""Steady state and noise: warm-up detected from the data, spread within and between runs, and
the smallest speed-up that can be told from noise with n interleaved repeats.
"""

from __future__ import annotations

import math
import statistics

from infrarsi.trial.metrics import cv  # noqa: F401  (re-exported: the doctor's noise measure)

Z_95 = 1.959964  # two-sided 95% normal quantile
TARGET_EFFECT = 0.05  # the verifier should resolve a 5% speed-up
MAX_REPEATS = 10


def warmup_steps(step_times_s: list[float]) -> int:
    """Leading steps slower than the steady state: each above median + 4 MADs of the second half.

    Stops at the first step that is not, and always leaves at least half of the steps.
    """
    tail = step_times_s[len(step_times_s) // 2:]
    median = statistics.median(tail)
    mad = statistics.median(abs(t - median) for t in tail)
    threshold = median + 4 * max(mad, 0.02 * median)
    count = 0
    for t in step_times_s[:len(step_times_s) // 2]:
        if t <= threshold:
            break
        count += 1
    return count


def min_detectable_effect(cv_between: float, repeats: int) -> float:
    """Relative difference of two means of ``repeats`` runs each that is significant at 95%.

    Normal approximation: z * sqrt(2 / n) * cv, with cv the run-to-run coefficient of variation.
    """
    return Z_95 * math.sqrt(2 / repeats) * cv_between


def recommended_repeats(cv_between: float, target: float = TARGET_EFFECT) -> int:
    """Fewest interleaved repeats whose minimum detectable effect is at most ``target``."""
    for n in range(1, MAX_REPEATS + 1):
        if min_detectable_effect(cv_between, n) <= target:
            return n
    return MAX_REPEATS
