"""The search's step after its start: the incumbent's neighbourhood, ordered by the models.

On small structured spaces local search from a good start is the state of the art (on
NAS-Bench-201 it beats Bayesian optimisation; CARBS searches around a good start, TuRBO and
CASMOPOLITAN inside a trust region), and a user's own launch command is such a start. On the
tables the best cell sat one or two changes from the priors' pick, and a global acquisition
spent trials far from it. So each step:

1. **The neighbourhood**: every untried config within ``radius`` free changes of the incumbent
   (a free knob's value or a patch on or off; the knobs derived from them follow and are not
   counted), of those the memory model does not exclude.
2. **A far jump** first, when the models predict one clearly better: the untried config with
   the best posterior mean outside the neighbourhood, if it is likely to fit and its posterior
   mean beats every neighbour's and the incumbent's by ``margin`` (optima several changes
   away, which a walk one change at a time reaches late).
3. **Otherwise the best neighbour** by the acquisition (log expected improvement + log P(fits)
   per expected second) — every one-change value of every knob, not one value per knob.
4. **Widen** by one change at a time while the neighbourhood holds nothing, or nothing the
   models expect to gain ``least_gain`` (expected improvement times P(fits)).

Pure functions over the models' per-candidate arrays, so each rule has a fast test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from infrarsi.identity import canonical_value
from infrarsi.run.space import Config

Array = np.ndarray


def free_codes(
    candidates: Sequence[Config], free_knobs: Sequence[str], patches: Sequence[str]
) -> Array:
    """Per candidate, one integer per free knob (its value's index among the values seen) and
    one 0/1 per patch: two configs' free distance is the count of columns that differ."""
    columns: list[list[int]] = []
    for name in free_knobs:
        levels: dict[object, int] = {}
        columns.append(
            [
                levels.setdefault(canonical_value(c.knob_dict.get(name)), len(levels))
                for c in candidates
            ]
        )
    for patch in patches:
        columns.append([int(patch in c.patches) for c in candidates])
    if not columns:
        return np.zeros((len(candidates), 0), dtype=np.int64)
    return np.array(columns, dtype=np.int64).T


@dataclass(frozen=True)
class Scores:
    """What the models say of each candidate (arrays of one length): the acquisition, the
    posterior mean of log step time, log expected improvement, P(OOM); and which may be
    proposed (untried, not excluded by the memory model, not known slow)."""

    acq: Array
    mu: Array
    log_ei: Array
    p_oom: Array
    allowed: Array


@dataclass(frozen=True)
class Step:
    """The local step's choice: the candidate's index, how it was chosen (``jump``,
    ``neighbour``) and the radius it was found at."""

    index: int
    how: str
    radius: int


def local_step(
    scores: Scores,
    codes: Array,
    incumbent: int,
    radius: int,
    margin: float,
    least_gain: float,
    jump_p_oom: float,
) -> Step | None:
    """The next config of the local search (module docstring), or None when nothing is
    allowed. ``margin``: the log step time a far config's posterior mean must beat every
    neighbour's by; ``least_gain``: the expected gain (log time, times P(fits)) below which a
    neighbourhood counts as spent and the search widens; ``jump_p_oom``: the most P(OOM) a
    jump may carry."""
    if not scores.allowed.any():
        return None
    dist = (codes != codes[incumbent]).sum(axis=1)
    widest = int(dist.max()) if len(dist) else 0
    gain = np.exp(scores.log_ei) * (1 - scores.p_oom)
    r = max(1, radius)
    while r < widest:
        near = scores.allowed & (dist <= r)
        if near.any() and float(np.max(np.where(near, gain, 0.0))) >= least_gain:
            break
        r += 1
    near = scores.allowed & (dist <= r)
    jump = _jump(scores, near, incumbent, margin, jump_p_oom)
    if jump is not None:
        return Step(jump, "jump", r)
    if not near.any():
        near = scores.allowed
    return Step(int(np.argmax(np.where(near, scores.acq, -np.inf))), "neighbour", r)


def _jump(
    scores: Scores, near: Array, incumbent: int, margin: float, jump_p_oom: float
) -> int | None:
    """The untried config outside the neighbourhood with the best posterior mean, when it is
    likely to fit and beats the incumbent and every neighbour by ``margin``; else None."""
    far = scores.allowed & ~near & (scores.p_oom <= jump_p_oom)
    if not far.any():
        return None
    best_far = int(np.argmin(np.where(far, scores.mu, np.inf)))
    bar = min(
        float(scores.mu[incumbent]),
        float(np.min(np.where(near, scores.mu, np.inf))) if near.any() else np.inf,
    )
    return best_far if scores.mu[best_far] < bar - margin else None
