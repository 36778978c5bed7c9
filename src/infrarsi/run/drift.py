"""Drift: the machine's load changing while a search runs.

A shared machine can slow every trial down by 2x for a while (other work starting), and a
search that compares raw times then ranks configs by when they ran, not by what they are. The
search re-measures the baseline between trials (``REBASE_EVERY``); when the baseline's repeats
spread more than the between-run noise allows, each trial is compared against the baseline
measured nearest in time — its time is taken relative to that baseline, on the scale of the
baselines' median — and a candidate is ranked by that ratio. Without drift nothing is adjusted
(adjusting would only add the baseline's own noise to every trial).
"""

from __future__ import annotations

import math

import numpy as np

REBASE_EVERY = 8  # trials between two measurements of the baseline
DRIFT_VAR_RATIO = 4.0  # the baseline's spread (variance of log time) over the noise that
# says the load changed: with 3 repeats, a chi-square with 2 degrees of freedom passes 4x its
# mean with odds below 2%
DRIFT_MIN_LOG = math.log(1.10)  # and its range must exceed 10%


def drift_present(baseline_logs: list[float], noise_var_log: float) -> bool:
    """Whether the baseline's repeated measurements moved more than noise explains."""
    if len(baseline_logs) < 2:
        return False
    spread = float(np.var(baseline_logs, ddof=1))
    return (
        spread > DRIFT_VAR_RATIO * max(noise_var_log, 1e-6)
        and max(baseline_logs) - min(baseline_logs) > DRIFT_MIN_LOG
    )


def offsets(
    times_log: list[float | None], is_baseline: list[bool], noise_var_log: float
) -> np.ndarray:
    """Per trial (in the order they ran), what to subtract from its log time: the log time of
    the baseline measured nearest to it (two equally near: their mean) less the baselines'
    median; all zero when no drift is present. Trials without a time (None) get 0."""
    n = len(times_log)
    at = [i for i in range(n) if is_baseline[i] and times_log[i] is not None]
    known = {i: t for i, t in enumerate(times_log) if t is not None}
    logs = [known[i] for i in at]
    if not drift_present(logs, noise_var_log):
        return np.zeros(n)
    centre = float(np.median(logs))
    out = np.zeros(n)
    for i in range(n):
        gap = min(abs(j - i) for j in at)
        out[i] = float(np.mean([known[j] for j in at if abs(j - i) == gap])) - centre
    return out


def rebase_due(is_baseline: list[bool], after_start: int) -> bool:
    """Whether the next trial should measure the baseline again: ``REBASE_EVERY`` trials since
    the last one, counted after the start design."""
    if after_start < REBASE_EVERY:
        return False
    since = next((k for k, b in enumerate(reversed(is_baseline)) if b), len(is_baseline))
    return since >= REBASE_EVERY
