"""Pairing: when the candidate with the highest expected improvement is likely to run out of
memory, one of its memory-saving variants that the memory model expects to fit is proposed in
its place (checkpointing on, a smaller micro-batch, a memory patch added). Off in the InfraRSI
searcher since its local search, whose neighbourhood holds those variants anyway (``PAIRING``);
kept for the benchmark's ablation. The rescue (``RESCUE``, on) is pairing after the fact: a
start point — the priors' pick, a seed — that ran out of memory is followed by its variant that
makes it fit at the same micro-batch.
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


# the rescue: a start point that ran out of memory is followed by its memory-saving variant at
# the same micro-batch (checkpointing on, a memory patch added; the one the acquisition scores
# highest under the cap) before the local search moves elsewhere — the move a practitioner
# makes when the largest micro-batch does not fit: make it fit rather than give it up. Chosen
# 2026-12-07 (issue 65, round six) on the 25 tables seen (``bench/search_variants.py``, 16
# seeds): mean area 0.494 against 0.516 without, average rank among grid, greedy, random and
# TPE with the catalog's picks 3.08 against 3.18, median-seed OOM trials summed 39 both; a
# smaller micro-batch allowed as the variant too (``RESCUE_KEEPS_MICRO_BATCH`` False) was worse
# on five tables (mean rank 1.6 against 1.4), and only a variant expected to fit
# (P(OOM) <= ``PAIR_SAFE``) changed nothing but prefetch's gain, lost
RESCUE = True
RESCUE_KEEPS_MICRO_BATCH = True


def rescue_pick(
    problem: Problem,
    starts: list[Config],
    ended_oom: set[Config],
    tried: set[Config],
    acq: Array,
    p_oom: Array,
    cap: float,
) -> Config | None:
    """The first start point that ended OOM with no memory-saving variant tried yet: its
    untried variant (``memory_savers``; at its micro-batch while ``RESCUE_KEEPS_MICRO_BATCH``)
    the acquisition scores highest among those whose P(OOM) is at most ``cap``; None where no
    start point needs one or none is allowed."""
    index = problem.index
    for start in starts:
        if start not in ended_oom:
            continue
        savers = [v for v in memory_savers(problem, start) if v in index]
        mb = problem.savers.micro_batch
        if RESCUE_KEEPS_MICRO_BATCH and mb is not None:
            kept = start.knob_dict.get(mb)
            savers = [v for v in savers if v.knob_dict.get(mb) == kept]
        if any(v in tried for v in savers):
            continue
        allowed = [index[v] for v in savers if p_oom[index[v]] <= cap]
        if allowed:
            return problem.candidates[max(allowed, key=lambda j: acq[j])]
    return None
