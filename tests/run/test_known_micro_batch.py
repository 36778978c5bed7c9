"""Without a memory estimate, the start keeps to the micro-batch known to fit: the baseline's."""

import itertools
import math

import numpy as np
import pytest

from infrarsi.run import problem as problem_module
from infrarsi.run.infrarsi_searcher import InfraRSISearcher
from infrarsi.run.problem import MemorySavers, Outcome, Problem
from infrarsi.run.space import Config, Space

GLOBAL = 16
CAPACITY = 2.0e9


def _configs():
    return [
        Config.of({"micro_batch": mb, "accum": GLOBAL // mb, "nproc": n, "threads": t})
        for mb, n, t in itertools.product([1, 4, 16], [1, 2], [1, 2])
    ]


def _problem(estimate: bool, capacity: float | None = CAPACITY) -> Problem:
    configs = _configs()
    space = Space.from_levels(
        {"micro_batch": [1, 4, 16], "accum": [1, 4, 16], "nproc": [1, 2], "threads": [1, 2]}, []
    )
    baseline = Config.of({"micro_batch": 4, "accum": 4, "nproc": 2, "threads": 1})
    analytic = (lambda cs: np.log([_peak(c) for c in cs])) if estimate else None
    return Problem(
        configs,
        space,
        baseline,
        capacity_bytes=capacity,
        analytic_log_peak=analytic,
        baseline_peak_bytes=_peak(baseline),
        savers=MemorySavers(None, "micro_batch", (), ("accum",)),
    )


def _peak(config: Config) -> float:
    """One rank's peak: a fixed part and the activations of its micro-batch."""
    return 0.8e9 + 0.2e9 * config.knob_dict["micro_batch"]


def _step_s(config: Config) -> float:
    k = config.knob_dict
    return (
        0.1
        * (1.6 if k["nproc"] == 2 else 1.0)
        / (1 + 0.1 * math.log2(k["micro_batch"]))
        / (1 + 0.5 * (k["threads"] - 1))
    )


def _outcome(config: Config) -> Outcome:
    if _peak(config) > CAPACITY:
        return Outcome("oom", cost_s=2.0, cap_bytes=CAPACITY)
    return Outcome(
        "ok", ranked_time_per_step_s=_step_s(config), peak_bytes=_peak(config), cost_s=5.0
    )


def test_without_an_estimate_the_pick_and_the_prior_stop_at_the_baselines_micro_batch():
    blind = _problem(estimate=False)
    pick = blind.prior_pick()
    assert pick is not None and pick.knob_dict["micro_batch"] == 4
    claimed = dict(zip(blind.candidates, blind.knob_prior_parts[:, 0]))
    over = Config.of({"micro_batch": 16, "accum": 1, "nproc": 2, "threads": 1})
    under = Config.of({"micro_batch": 1, "accum": 16, "nproc": 2, "threads": 1})
    assert claimed[over] == 0.0  # no gain claimed where nothing says it fits
    assert claimed[under] == pytest.approx(2 * -problem_module.MICRO_BATCH_PRIOR_LOG)
    # an estimate speaks: the largest micro-batch it admits (at 5 GB, 16's 4 GB)
    told = _problem(estimate=True, capacity=5.0e9)
    assert told.prior_pick().knob_dict["micro_batch"] == 16
    assert dict(zip(told.candidates, told.knob_prior_parts[:, 0]))[over] < 0
    # no capacity binds: nothing to keep to
    free = _problem(estimate=False, capacity=None)
    assert free.prior_pick().knob_dict["micro_batch"] == 16


@pytest.mark.parametrize("rule", [True, False])
def test_the_blind_start_spends_no_trial_on_a_micro_batch_that_does_not_fit(monkeypatch, rule):
    """Without the rule, the priors' pick after the baseline is the largest micro-batch, which
    runs out of memory; with it, the first two trials fit (the pick, else the space-filling
    point, keeps to the baseline's micro-batch or under it)."""
    monkeypatch.setattr(problem_module, "KNOWN_MICRO_BATCH_PICK", rule)
    monkeypatch.setattr(problem_module, "KNOWN_MICRO_BATCH_PRIOR", rule)
    p = _problem(estimate=False)
    searcher = InfraRSISearcher(p, seed=0)
    first = []
    for _ in range(2):
        config = searcher.ask()
        assert config is not None
        first.append(_peak(config) > CAPACITY)
        searcher.tell(config, _outcome(config))
    assert any(first) is not rule
