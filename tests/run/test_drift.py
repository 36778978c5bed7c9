"""Drift: a load change during a search is noticed on the baseline's repeats and taken out."""

import math

import numpy as np

from infrarsi.run import drift
from infrarsi.run.infrarsi_searcher import InfraRSISearcher
from infrarsi.run.problem import Outcome, Problem
from infrarsi.run.space import Config, Space

NOISE = math.log1p(0.03**2)


def test_no_drift_no_adjustment_and_a_load_change_is_taken_out():
    quiet = [0.0, 0.01, 0.3, -0.01, 0.2]
    assert not drift.offsets(quiet, [True, False, False, True, False], NOISE).any()
    loaded = [0.0, 0.1, 0.7, 0.69, 0.8]  # the machine became 2x slower after trial 2
    off = drift.offsets(loaded, [True, False, False, True, False], NOISE)
    assert off[0] < 0 < off[3] and off[1] == off[0] and off[2] == off[3] == off[4]
    assert off[3] - off[0] == 0.69


def test_the_baseline_is_measured_again_every_few_trials():
    flags = [True] + [False] * (drift.REBASE_EVERY - 1)
    assert not drift.rebase_due(flags, after_start=2)
    assert drift.rebase_due(flags + [False], after_start=drift.REBASE_EVERY)
    assert not drift.rebase_due(flags[:-2] + [True, False, False], drift.REBASE_EVERY)


def test_a_search_measures_the_baseline_again_and_ranks_by_ratio_to_the_nearest_baseline():
    configs = [Config.of({"a": a}) for a in range(30)]
    space = Space.from_levels({"a": list(range(30))}, [])
    searcher = InfraRSISearcher(Problem(configs, space, configs[0], noise_var_log=NOISE), 0)
    for _ in range(len(searcher.start) + drift.REBASE_EVERY + 1):  # the baseline, again
        config = searcher.ask()
        searcher.tell(
            config,
            Outcome("ok", ranked_time_per_step_s=1.0 - 0.01 * config.knob_dict["a"], cost_s=1.0),
        )
    assert [c for c, _ in searcher.history].count(configs[0]) >= 2
    # a config measured under a 2x load is compared with the baseline of its time
    base, quick, slow_looking = configs[0], configs[5], configs[20]
    told = InfraRSISearcher(Problem(configs, space, base, noise_var_log=NOISE), 0)
    for config, seconds in [
        (base, 1.0),
        (quick, 0.9),
        (base, 1.0),
        (base, 2.0),
        (slow_looking, 1.6),
        (base, 2.0),
        (configs[25], 1.9),
    ]:
        told.tell(config, Outcome("ok", ranked_time_per_step_s=seconds, cost_s=1.0))
    assert told.ranking(2)[0] == slow_looking  # 0.8 of its baseline, against 0.9
    assert np.ptp(told.drift_log) > 0.5
