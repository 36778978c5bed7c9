"""The search benchmark's scoring rules (``bench/scoring.py``), pure and fast: the target set,
normalised regret, trials to target from then on, Holm's correction, the paired tests' effect
size, ranks over tables."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import scoring  # noqa: E402


def test_the_target_set_is_near_the_best_and_faster_than_the_baseline():
    log = {
        c: math.log(t) for c, t in {"best": 1.0, "near": 1.02, "noisy": 1.2, "base": 1.1}.items()
    }
    se = {"best": 0.001, "near": 0.001, "noisy": 0.5, "base": 0.001}
    target, best = scoring.target_set(log, se, set(log), "base")
    # 3% at least around the best; a noisy cell's own wide interval does not qualify it
    assert best == "best" and target == {"best", "near"}
    wide = {**se, "best": 0.05}  # the best's own standard error widens the set (2 x 5%)
    assert scoring.target_set(log, wide, set(log), "base")[0] == {"best", "near"}
    slow_base = {**log, "base": math.log(1.01)}  # a cell no faster than the baseline is out
    assert scoring.target_set(slow_base, se, set(log), "base")[0] == {"best", "base"} - {"base"}


def test_normalised_regret_and_trials_to_target_from_then_on():
    assert scoring.normalised_regret(None, 1.0, 2.0) == 1.0
    assert scoring.normalised_regret(1.5, 1.0, 2.0) == 0.5
    assert scoring.normalised_regret(2.4, 1.0, 2.0) == pytest.approx(1.4)  # worse than baseline
    assert scoring.trials_to_target([False, True, False, True, True]) == 4  # a lucky visit lost
    assert scoring.trials_to_target([True, True]) == 1
    assert scoring.trials_to_target([True, False]) is None
    assert scoring.budget_trials(36, 25) == 9 and scoring.budget_trials(36, 5) == 2
    assert scoring.budget_trials(10, 5) == 1


def test_holm_adjusts_step_down_and_keeps_order():
    adjusted = scoring.holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adjusted == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})


def test_the_paired_tests_are_two_sided_with_direction_and_effect_size():
    rng = np.random.default_rng(0)
    ours = rng.uniform(0.0, 0.2, 30)
    scores = {"infrarsi": ours, "worse": ours + 0.3, "better": ours - 0.1, "same": ours.copy()}
    tests = scoring.paired_tests(scores)
    assert tests["worse"]["direction"] == "peer worse" and tests["worse"]["rank_biserial"] == 1.0
    assert tests["better"]["direction"] == "peer better"
    assert tests["better"]["rank_biserial"] == -1.0
    assert tests["same"]["p_value"] == 1.0 and tests["same"]["direction"] == "no difference"
    lo, hi = tests["worse"]["median_difference_ci95"]
    assert lo <= 0.3 <= hi


def test_the_ablations_are_corrected_in_a_family_of_their_own_never_the_peers():
    rng = np.random.default_rng(1)
    ours = rng.uniform(0.0, 0.2, 30)
    noise = rng.normal(0.0, 0.05, 30)
    scores = {"infrarsi": ours, "peer": ours + 0.02 + noise}
    ablations = {f"infrarsi-no-{k}": ours + 0.01 + rng.normal(0.0, 0.05, 30) for k in "abcd"}
    alone = scoring.paired_tests(scores)["peer"]
    tests = scoring.paired_tests({**scores, **ablations}, apart=frozenset(ablations))
    assert tests["peer"]["p_holm"] == alone["p_holm"] == alone["p_value"]  # a family of one
    lumped = scoring.paired_tests({**scores, **ablations})["peer"]["p_holm"]
    assert lumped > tests["peer"]["p_holm"]  # five in one family widen the peer's
    raw = {n: tests[n]["p_value"] for n in ablations}
    assert {n: tests[n]["p_holm"] for n in ablations} == scoring.holm(raw)


def test_average_ranks_and_the_critical_difference():
    ranks = scoring.average_ranks(
        {"t1": {"a": 0.1, "b": 0.2, "c": 0.2}, "t2": {"a": 0.3, "b": 0.1, "c": 0.5}}
    )
    assert ranks == {"a": 1.5, "b": 1.75, "c": 2.75}  # ties share 2.5
    assert scoring.critical_difference(3, 1) is None
    cd = scoring.critical_difference(3, 10)
    assert cd == pytest.approx(2.343 * math.sqrt(3 * 4 / 60), rel=1e-2)  # Demsar (2006), q_0.05


def test_a_table_every_searcher_solves_at_once_is_uninformative():
    assert not scoring.informative({"a": 1.0, "b": 2.0})
    assert scoring.informative({"a": 1.0, "b": 3.0})
    assert scoring.informative({"a": 1.0, "b": None})
