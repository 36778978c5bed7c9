"""Measuring a config again, in the earlier search step (``local=False``, kept for the
benchmark's ablations): every ``RERUN_EVERY``-th trial the top configs by posterior mean that ran
least often run again, and once exploring is expected to gain nothing the ranking Apply reads is
firmed up by repeats of the top ``FIRM_TOP``. The local search re-measures nothing but the drift
check's baseline (``run/drift.py``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from infrarsi.records.trial import TrialStatus
from infrarsi.run.problem import Outcome
from infrarsi.run.space import Config

RERUN_EVERY = 7  # one trial in seven re-measures a top candidate (METHODS: 10-15% of a budget)
RERUN_MAX = 3
FIRM_TOP = 3  # configs re-measured once exploring is expected to gain nothing
FIRM_MAX = 6  # measurements of one config at most


def least_measured_top(
    history: Sequence[tuple[Config, Outcome]],
    mu: np.ndarray,
    index: dict[Config, int],
    k: int,
    cap: int,
) -> Config | None:
    """Of the ``k`` configs that ran ok with the best posterior mean ``mu`` (by candidate
    ``index``), the one measured fewest times, if under ``cap`` measurements."""
    counts: dict[Config, int] = {}
    for c, o in history:
        if o.status == TrialStatus.OK:
            counts[c] = counts.get(c, 0) + 1
    top = sorted(counts, key=lambda c: mu[index[c]])[:k]
    fewest = [c for c in top if counts[c] < cap]
    return min(fewest, key=lambda c: counts[c]) if fewest else None


def rerun_due(trials_after_start: int) -> bool:
    """Whether this trial (counted from the end of the start) is a re-measure's turn: under
    noise the incumbent is an estimate, and a second measurement is what separates a fast
    config from a lucky one."""
    return trials_after_start > 0 and trials_after_start % RERUN_EVERY == RERUN_EVERY - 1
