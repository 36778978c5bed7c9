"""Pairing: when the candidate with the highest expected improvement is likely to run out of
memory, one of its memory-saving variants that the memory model expects to fit is proposed in
its place (checkpointing on, a smaller micro-batch, a memory patch added). Off in the InfraRSI
searcher since its local search, whose neighbourhood holds those variants anyway (``PAIRING``);
kept for the benchmark's ablation.
"""

from __future__ import annotations

import math

import numpy as np

from infrarsi.identity import differing_knobs
from infrarsi.run.problem import Problem
from infrarsi.run.space import Config

Array = np.ndarray

# the highest-EI candidate is paired when its P(OOM) is above PAIR_RISK, with a variant whose
# P(OOM) is at most PAIR_SAFE (also the most a far jump of the local search may risk)
PAIR_RISK = 0.5
# pairing: off since the local search, whose neighbourhood holds those variants anyway; on the
# 16 informative seen tables (10 seeds) the local search ranked 3.94 with it and 3.56 without,
# on the 7 of >= 96 cells (16 seeds) 4.71 with it and 4.79 without: it did not pay
# (bench/search_variants.py)
PAIRING = False
PAIR_SAFE = 0.2


def paired_pick(
    problem: Problem,
    pick: int,
    log_ei: Array,
    p_oom: Array,
    acq: Array,
    untried: Array,
    chosen: list[int],
) -> int:
    """``pick``, or in its place a memory-saving variant of the highest-EI candidate when that
    one is likely to run out of memory (``PAIR_RISK``), holds at least twice ``pick``'s EI,
    and has a variant expected to fit (``PAIR_SAFE``) scoring within 4x of ``pick``."""
    risky = int(np.argmax(np.where(untried, log_ei, -np.inf)))
    if p_oom[risky] <= PAIR_RISK or log_ei[risky] < log_ei[pick] + math.log(2):
        return pick
    index = problem.index
    variants = [
        index[v]
        for v in memory_savers(problem, problem.candidates[risky])
        if v in index and untried[index[v]] and index[v] not in chosen
    ]
    safe = [j for j in variants if p_oom[j] <= PAIR_SAFE and acq[j] >= acq[pick] - math.log(4)]
    return max(safe, key=lambda j: acq[j]) if safe else pick


def memory_savers(problem: Problem, config: Config) -> list[Config]:
    """The candidates that are ``config`` with one memory saver applied: checkpointing on, a
    smaller micro-batch, a memory patch added (the knobs that derive from them follow)."""
    s, knobs, out = problem.savers, config.knob_dict, []
    for c in problem.candidates:
        ck = c.knob_dict
        diff = differing_knobs(ck, knobs, knobs)
        added = c.patches - config.patches
        if not config.patches <= c.patches:
            continue
        if (
            s.checkpointing
            and diff == {s.checkpointing}
            and not added
            and str(ck[s.checkpointing]).lower() in ("true", "1")
        ):
            out.append(c)
        elif (
            s.micro_batch
            and s.micro_batch in diff
            and not added
            and float(ck[s.micro_batch]) < float(knobs[s.micro_batch])
            and diff - set(s.follows) == {s.micro_batch}
        ):
            out.append(c)
        elif not diff and added and added <= set(s.patches):
            out.append(c)
    return out
