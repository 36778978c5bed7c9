"""The local search's step (``run/local.py``): neighbourhood, far jump, widening."""

from __future__ import annotations

import math

import numpy as np

from infrarsi.run.local import Scores, free_codes, local_step
from infrarsi.run.space import Config


def _grid() -> list[Config]:
    """3 x 3 values of two knobs, with and without one patch: 18 configs."""
    return [
        Config.of({"a": a, "b": b, "accum": 8 // b}, {"p"} if p else set())
        for a in (1, 2, 4)
        for b in (1, 2, 4)
        for p in (False, True)
    ]


def _scores(configs: list[Config], mu: dict[int, float], **kw: np.ndarray) -> Scores:
    n = len(configs)
    means = np.zeros(n)
    for i, m in mu.items():
        means[i] = m
    log_ei = kw.get("log_ei", -means)
    return Scores(
        acq=kw.get("acq", log_ei),
        mu=means,
        log_ei=log_ei,
        p_oom=kw.get("p_oom", np.zeros(n)),
        allowed=kw.get("allowed", np.ones(n, dtype=bool)),
    )


def test_free_distance_counts_free_knobs_and_patches_not_derived_ones() -> None:
    configs = _grid()
    codes = free_codes(configs, ["a", "b"], ["p"])
    dist = (codes != codes[0]).sum(axis=1)
    # b changes accum too (derived): still one free change
    one = [c for c, d in zip(configs, dist) if d == 1]
    assert len(one) == 2 + 2 + 1
    assert Config.of({"a": 1, "b": 2, "accum": 4}) in one
    assert free_codes(  # 2 and 2.0 alike
        [Config.of({"a": 2}), Config.of({"a": 2.0})], ["a"], []
    ).tolist() == [[0], [0]]


def test_the_best_neighbour_by_the_acquisition_is_chosen_not_a_far_config() -> None:
    configs = _grid()
    codes = free_codes(configs, ["a", "b"], ["p"])
    n = len(configs)
    acq = np.full(n, -5.0)
    far = configs.index(Config.of({"a": 4, "b": 4, "accum": 2}, {"p"}))
    near = configs.index(Config.of({"a": 1, "b": 1, "accum": 8}, {"p"}))
    acq[far], acq[near] = 0.0, -1.0  # the far config scores higher, its mean no better
    allowed = np.ones(n, dtype=bool)
    allowed[0] = False  # the incumbent ran
    step = local_step(
        _scores(configs, {}, acq=acq, log_ei=np.zeros(n), allowed=allowed),
        codes,
        0,
        1,
        margin=0.05,
        least_gain=0.01,
        jump_p_oom=0.2,
    )
    assert step is not None and (step.index, step.how, step.radius) == (near, "neighbour", 1)


def test_a_far_config_predicted_clearly_better_is_jumped_to_when_it_likely_fits() -> None:
    configs = _grid()
    codes = free_codes(configs, ["a", "b"], ["p"])
    n = len(configs)
    far = configs.index(Config.of({"a": 4, "b": 4, "accum": 2}, {"p"}))
    allowed = np.ones(n, dtype=bool)
    allowed[0] = False
    scores = _scores(configs, {far: -0.3}, log_ei=np.zeros(n), allowed=allowed)
    step = local_step(scores, codes, 0, 1, margin=0.1, least_gain=0.01, jump_p_oom=0.2)
    assert step is not None and (step.index, step.how) == (far, "jump")
    # not clearly better: a neighbour
    step = local_step(scores, codes, 0, 1, margin=0.5, least_gain=0.01, jump_p_oom=0.2)
    assert step is not None and step.how == "neighbour"
    # likely out of memory: no jump
    p_oom = np.zeros(n)
    p_oom[far] = 0.5
    risky = Scores(scores.acq, scores.mu, scores.log_ei, p_oom, allowed)
    step = local_step(risky, codes, 0, 1, margin=0.1, least_gain=0.01, jump_p_oom=0.2)
    assert step is not None and step.how == "neighbour"


def test_a_spent_neighbourhood_widens_one_change_at_a_time() -> None:
    configs = _grid()
    codes = free_codes(configs, ["a", "b"], ["p"])
    dist = (codes != codes[0]).sum(axis=1)
    n = len(configs)
    log_ei = np.full(n, math.log(1e-6))  # nothing near is expected to gain
    two = np.flatnonzero(dist == 2)
    log_ei[two[0]] = math.log(0.02)
    allowed = np.ones(n, dtype=bool)
    allowed[0] = False
    step = local_step(
        _scores(configs, {}, log_ei=log_ei, allowed=allowed),
        codes,
        0,
        1,
        margin=1.0,
        least_gain=0.01,
        jump_p_oom=0.2,
    )
    assert step is not None and (step.index, step.radius) == (int(two[0]), 2)
    # every neighbour tried: the region widens past them
    allowed = dist >= 2
    step = local_step(
        _scores(configs, {}, log_ei=np.zeros(n), allowed=allowed),
        codes,
        0,
        1,
        margin=1.0,
        least_gain=0.01,
        jump_p_oom=0.2,
    )
    assert step is not None and step.radius == 2 and dist[step.index] == 2


def test_nothing_allowed_is_no_step() -> None:
    configs = _grid()
    codes = free_codes(configs, ["a", "b"], ["p"])
    scores = _scores(configs, {}, allowed=np.zeros(len(configs), dtype=bool))
    assert local_step(scores, codes, 0, 1, margin=0.1, least_gain=0.01, jump_p_oom=0.2) is None
