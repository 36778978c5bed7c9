"""The InfraRSI searcher's trust region: proposals change at most ``radius`` knobs and patches
of the incumbent (changes counted as in ``problem.distance``), after CASMOPOLITAN (Wan et al.
2021: Hamming-distance regions for categorical and mixed spaces). The radius grows after
improvements in a row and shrinks after failures, replayed from the history so that a
resumed search has the same region.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from infrarsi.records.trial import TrialStatus
from infrarsi.run.problem import Outcome, distance
from infrarsi.run.space import Config

# the earlier search step's radius (the local search starts at its own LOCAL_RADIUS); chosen on
# the 2026-12-03 replays of the six informative tables committed then (area under the
# normalised regret curve, 10 seeds: 0.630 -> 0.615)
TRUST_RADIUS: int | None = 2
TRUST_SUCCESSES = 2
TRUST_FAILURES = 3


def replayed_radius(
    history: Sequence[tuple[Config, Outcome]],
    start: int,
    start_points: set[Config],
    baseline: Config,
    widest: int,
) -> int:
    """The radius after ``history``: ``start`` at first; one wider (at most ``widest``) after
    ``TRUST_SUCCESSES`` trials in a row that improved on the best measured time, one narrower
    after ``TRUST_FAILURES`` in a row that did not, back to ``start`` below 1 (a restart: the
    models keep every trial). The start points and the baseline count for the best time, not
    for the region."""
    radius, wins, losses, best = start, 0, 0, math.inf
    for c, o in history:
        t = math.log(o.time_s) if o.status == TrialStatus.OK else math.inf
        if c in start_points or c == baseline:
            best = min(best, t)
            continue
        if t < best:
            wins, losses, best = wins + 1, 0, t
        else:
            wins, losses = 0, losses + 1
        if wins >= TRUST_SUCCESSES:
            radius, wins = min(radius + 1, widest), 0
        if losses >= TRUST_FAILURES:
            radius, losses = radius - 1, 0
        if radius < 1:
            radius = start
    return radius


def within(candidates: Sequence[Config], centre: Config, radius: int) -> np.ndarray:
    """Per candidate, whether it lies within ``radius`` changes of ``centre``."""
    return np.array([distance(c, centre) <= radius for c in candidates])
