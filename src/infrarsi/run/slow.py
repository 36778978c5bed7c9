"""The slow bound: a trial that has cost ``k`` times what the incumbent's trials cost (their
median) is cut short and told ``slow`` at ``k`` times the incumbent's posterior step time — a
right-censored time, as an OOM's peak is at the capacity. ``k`` grows with the machine's
between-run noise (``slow_factor``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from infrarsi.records.trial import TrialStatus
from infrarsi.run.problem import Outcome, SlowBound
from infrarsi.run.space import Config

SLOW_MIN = 2.0
SLOW_Z = 4.0


def slow_factor(noise_var_log: float) -> float:
    """How many times the incumbent's cost a trial may take before it is cut short: at least
    ``SLOW_MIN``, wider on a noisy machine (``SLOW_Z`` between-run standard deviations in log
    time), so that noise alone cuts a config as fast as the incumbent with odds below 1e-4."""
    return max(SLOW_MIN, math.exp(SLOW_Z * math.sqrt(max(noise_var_log, 0.0))))


def slow_bound(
    history: Sequence[tuple[Config, Outcome]],
    incumbent: Config,
    incumbent_log_time: float,
    noise_var_log: float,
) -> SlowBound | None:
    """The bound for the next trial from the ``incumbent``'s ok trials' costs and its
    posterior log step time; None while none of them has a cost."""
    costs = [
        o.cost_s for c, o in history if c == incumbent and o.status == TrialStatus.OK and o.cost_s
    ]
    if not costs:
        return None
    k = slow_factor(noise_var_log)
    return SlowBound(k * float(np.median(costs)), k * math.exp(incumbent_log_time))
