"""What the InfraRSI searcher runs before its models choose: the start (the baseline, the
seeds, the priors' pick, space-filling points) and, in the earlier step, the cover (each free
knob and patch compared alone once)."""

from __future__ import annotations

import math
from collections.abc import Collection

import numpy as np

from infrarsi.run.problem import MEASURED_SLOW, Outcome, Problem, distance, free_change
from infrarsi.run.space import Config


def initial_design(problem: Problem, rng: np.random.Generator, n_seeds: int) -> list[Config]:
    """The baseline and the Doctor's seeds; then the candidate the priors expect fastest
    among those the analytic estimate says fit (without one, at most the baseline's
    micro-batch: ``Problem.within_known_micro_batch``); then space-filling picks up to ``n_seeds``
    (each the fitting candidate farthest from the design so far) so the first trials also
    tell the models what the priors do not know — which knobs matter here, and whether the
    patches' prior speed-ups hold on this host."""
    p = problem
    design = p.start_points()
    # what this host measured slow (the Doctor's calibration: bf16 where it is emulated)
    # is not worth a trial to learn what is already known; without a memory estimate, a
    # micro-batch over the baseline's is not known to fit
    fits = p.analytic_fits() & (p.measured <= math.log(MEASURED_SLOW))
    fits &= p.within_known_micro_batch()
    pool = [i for i in range(len(p.candidates)) if fits[i]]
    order = list(rng.permutation(pool))
    while len(design) < n_seeds + 1 + len(p.seeds) and order:
        gap = [min(distance(p.candidates[i], d) for d in design) for i in order]
        best = int(np.argmax(gap))
        if gap[best] == 0:
            break
        design.append(p.candidates[order[best]])
    return list(dict.fromkeys(design))


def cover_pick(
    problem: Problem,
    history: list[tuple[Config, Outcome]],
    tried: Collection[Config],
    scores: tuple[np.ndarray, np.ndarray, float],
    incumbent: int,
) -> Config | None:
    """While some free knob or patch has never been compared alone — no measured config
    has a tried neighbour that differs from it in that one change — the incumbent changed
    in one such dimension (the change the acquisition scores highest). A knob never varied
    looks flat to the step-time model, however much it matters; one comparison each lets
    the model see which do before it exploits. A change the Doctor measured slow on this
    host is known already and not tried. ``scores``: the acquisition and P(OOM) per
    candidate, and the P(OOM) cap of the moment."""
    p = problem
    acq, p_oom, cap = scores
    ok = [c for c, o in history if o.status.is_ok()]
    covered = {free_change(p, a, b) for a in ok for b in tried if a != b}
    centre = p.candidates[incumbent]
    known_slow = p.measured > math.log(MEASURED_SLOW)  # the Doctor measured it already
    options = [
        i
        for i, c in enumerate(p.candidates)
        if c not in tried
        and p_oom[i] <= cap
        and not known_slow[i]
        and (change := free_change(p, c, centre)) is not None
        and change not in covered
    ]
    return p.candidates[max(options, key=lambda i: acq[i])] if options else None
