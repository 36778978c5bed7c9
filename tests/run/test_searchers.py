"""Every searcher on a synthetic problem whose truth is known (pure, fast)."""

import itertools
import math

import numpy as np
import pytest

from infrarsi.run import searchers as registry
from infrarsi.run.infrarsi_searcher import InfraRSISearcher
from infrarsi.run.pairing import memory_savers
from infrarsi.run.problem import MemorySavers, Outcome, Problem, distance
from infrarsi.run.space import Config, Space
from infrarsi.run.steptime import log_expected_improvement

CAPACITY = 2.0e9


def truth(config):
    k = config.knob_dict
    mb, threads, ckpt = k["micro_batch"], k["threads"], k["ckpt"]
    step = 1.0 / (1 + 0.3 * math.log2(mb)) / (1 + 0.4 * (threads - 1)) * (1.3 if ckpt else 1.0)
    step *= 0.7 if "fast" in config.patches else 1.0
    peak = 1.0e9 + 0.25e9 * mb * (0.3 if ckpt else 1.0) * (0.7 if "lean" in config.patches else 1)
    return step, peak


def problem(analytic_scale: float = 1.1):
    """The toy problem; its analytic memory estimate is the true peak times ``analytic_scale``."""
    configs = [
        Config.of({"micro_batch": mb, "accum": 8 // mb, "threads": t, "ckpt": c}, p)
        for mb, t, c in itertools.product([1, 2, 4, 8], [1, 2], [False, True])
        for p in ([], ["fast"], ["lean"], ["fast", "lean"])
    ]
    space = Space.from_levels(
        {
            "micro_batch": [1, 2, 4, 8],
            "accum": [1, 2, 4, 8],
            "threads": [1, 2],
            "ckpt": [False, True],
        },
        ["fast", "lean"],
    )
    analytic = lambda cs: np.log([truth(c)[1] * analytic_scale for c in cs])  # noqa: E731
    return Problem(
        configs,
        space,
        configs[0],
        capacity_bytes=CAPACITY,
        analytic_log_peak=analytic,
        savers=MemorySavers("ckpt", "micro_batch", ("lean",), ("accum",)),
    )


def outcome_of(config, rng):
    """What a trial of ``config`` shows on the toy problem: an OOM past the capacity, else its
    true step time with 2% noise."""
    step, peak = truth(config)
    if peak > CAPACITY:
        return Outcome("oom", cost_s=2.0, cap_bytes=CAPACITY)
    return Outcome(
        "ok",
        ranked_time_per_step_s=step * math.exp(rng.normal(0, 0.02)),
        peak_bytes=peak,
        cost_s=5.0,
    )


def run(searcher, n, seed=0):
    rng = np.random.default_rng(seed)
    asked = []
    for _ in range(n):
        config = searcher.ask()
        if config is None:
            break
        searcher.tell(config, outcome_of(config, rng))
        asked.append(config)
    return asked


@pytest.mark.parametrize("name", registry.SEARCHERS)
def test_every_searcher_proposes_distinct_candidates_baseline_first(name):
    p = problem()
    searcher = registry.make(name, p, seed=1)
    asked = run(searcher, 20)
    assert asked[0] == p.baseline
    assert len(asked) == 20 and all(c in p.index for c in asked)
    again = [c for i, c in enumerate(asked) if c in asked[:i]]
    # InfraRSI measures its top candidates twice (one trial in seven, and every trial once
    # exploring is expected to gain nothing), each a config that ran ok before; Optuna's
    # samplers may propose a config again (it runs again, as proposed); the others never do
    if name == "infrarsi":
        assert again
    elif name not in ("tpe", "gp"):
        assert not again
    assert all(truth(c)[1] <= CAPACITY for c in again)
    best = searcher.recommend()
    assert best is not None and truth(best)[1] <= CAPACITY


def test_infrarsi_finds_the_fast_config_that_fits_and_avoids_what_does_not():
    p = problem()
    searcher = InfraRSISearcher(p, seed=0)
    asked = run(searcher, 16)
    feasible = [c for c in p.candidates if truth(c)[1] <= CAPACITY]
    best_s = min(truth(c)[0] for c in feasible)
    assert truth(searcher.recommend())[0] <= 1.05 * best_s
    ooms = sum(truth(c)[1] > CAPACITY for c in asked)
    assert ooms <= 3, ooms
    assert searcher.last is not None and 0 <= searcher.last.p_oom <= 1


def test_memory_savers_of_a_config_are_its_checkpointed_smaller_and_leaner_variants():
    p = problem()
    searcher = InfraRSISearcher(p)
    risky = Config.of({"micro_batch": 8, "accum": 1, "threads": 2, "ckpt": False}, ["fast"])
    variants = memory_savers(searcher.problem, risky)
    assert (
        Config.of({"micro_batch": 8, "accum": 1, "threads": 2, "ckpt": True}, ["fast"]) in variants
    )
    assert (
        Config.of({"micro_batch": 4, "accum": 2, "threads": 2, "ckpt": False}, ["fast"]) in variants
    )
    assert (
        Config.of({"micro_batch": 8, "accum": 1, "threads": 2, "ckpt": False}, ["fast", "lean"])
        in variants
    )
    assert all(c.knob_dict["threads"] == 2 and "fast" in c.patches for c in variants)


def test_log_expected_improvement_is_finite_and_monotone_far_in_the_tail():
    mu = np.linspace(-1, 40, 200)
    values = log_expected_improvement(0.0, mu, np.ones_like(mu))
    assert np.all(np.isfinite(values))
    assert np.all(np.diff(values) < 0)


def test_optuna_peers_tell_an_oom_as_a_violated_constraint():
    p = problem()
    searcher = registry.make("gp", p, seed=0)
    config = searcher.ask()
    searcher.tell(config, Outcome("oom", cost_s=1.0, cap_bytes=CAPACITY))
    (trial,) = [t for t in searcher.study.trials if t.state.name != "WAITING"]  # the told one
    assert trial.state.name == "COMPLETE"
    assert list(trial.constraints.values())[0] > 0


def test_an_unknown_searcher_names_the_known_ones():
    with pytest.raises(ValueError, match="infrarsi"):
        registry.make("bayes", problem())


def test_infrarsi_firms_up_its_top_configs_once_exploring_is_expected_to_gain_nothing():
    from infrarsi.run import remeasure as mod

    p = problem()
    searcher = InfraRSISearcher(p, seed=0, local=False)  # the local search re-measures nothing
    firmed = 0
    for _ in range(40):
        config = searcher.ask()  # the acquisition and the stop rule see every trial so far
        ran_ok = [c for c, o in searcher.history if o.status == "ok"]
        if searcher._nothing_left():
            mu = searcher._predict()[0]
            top = sorted(set(ran_ok), key=lambda c: mu[p.index[c]])[: mod.FIRM_TOP]
            if any(ran_ok.count(c) < mod.FIRM_MAX for c in top) and config != p.baseline:
                # past the stop rule only a top config runs again (or the baseline, measured
                # again every few trials to notice a change of load)
                assert config in top, "past the stop rule only a top config runs again"
                firmed += 1
        step, peak = truth(config)
        searcher.tell(
            config,
            Outcome("oom", cost_s=2.0, cap_bytes=CAPACITY)
            if peak > CAPACITY
            else Outcome("ok", ranked_time_per_step_s=step, peak_bytes=peak, cost_s=5.0),
        )
    assert firmed >= 5, "the toy problem is solved well within 40 trials"
    assert max(sum(c == h for h, _ in searcher.history) for c in p.candidates) <= mod.FIRM_MAX


def _precision_problem(measured):
    """A space with a precision knob; ``measured``: the Doctor's log ratio for bf16 (or None)."""
    configs = [
        Config.of({"micro_batch": mb, "threads": t, "precision": pr}, p)
        for mb, t, pr in itertools.product([1, 2, 4], [1, 2], ["fp32", "bf16"])
        for p in ([], ["fast"])
    ]
    space = Space.from_levels(
        {"micro_batch": [1, 2, 4], "threads": [1, 2], "precision": ["fp32", "bf16"]}, ["fast"]
    )
    prior = (
        None
        if measured is None
        else (
            lambda cs: np.array(  # noqa: E731
                [measured if c.knob_dict["precision"] == "bf16" else 0.0 for c in cs]
            )
        )
    )
    return Problem(
        configs,
        space,
        configs[0],
        patch_log_speed={"fast": math.log(0.8)},
        measured_log_speed=prior,
    )


def _precision_truth(config):
    k = config.knob_dict
    step = 1.0 / (1 + 0.2 * math.log2(k["micro_batch"])) / (1 + 0.3 * (k["threads"] - 1))
    return (
        step
        * (100.0 if k["precision"] == "bf16" else 1.0)
        * (0.8 if "fast" in config.patches else 1.0)
    )


def _ask_tell(searcher, n, truth_s):
    asked = []
    for _ in range(n):
        config = searcher.ask()
        if config is None:
            break
        searcher.tell(
            config,
            Outcome(
                "ok",
                ranked_time_per_step_s=truth_s(config),
                peak_bytes=1e9,
                cost_s=truth_s(config) * 10,
            ),
        )
        asked.append(config)
    return asked


def test_a_precision_the_doctor_measured_slow_is_not_proposed_before_the_fast_ones():
    searcher = InfraRSISearcher(_precision_problem(math.log(100.0)), seed=0)
    asked = _ask_tell(searcher, 10, _precision_truth)
    assert not [c for c in asked if c.knob_dict["precision"] == "bf16"], [
        c.describe() for c in asked
    ]


@pytest.mark.parametrize("claim, true_ratio, kept", [(0.5, 1.3, False), (0.8, 0.8, True)])
def test_a_patch_prior_fades_once_its_own_trials_contradict_it(claim, true_ratio, kept):
    p = _precision_problem(math.log(100.0))
    p = Problem(
        p.candidates,
        p.space,
        p.baseline,
        patch_log_speed={"fast": math.log(claim)},
        measured_log_speed=p.measured_log_speed,
    )

    def truth_s(config):
        base = _precision_truth(config) / (0.8 if "fast" in config.patches else 1.0)
        return base * (true_ratio if "fast" in config.patches else 1.0)

    searcher = InfraRSISearcher(p, seed=0)
    asked = _ask_tell(searcher, 14, truth_s)
    assert sum("fast" in c.patches for c in asked) >= 2
    searcher.recommend()  # refits on every trial
    assert searcher.patch_weights["fast"] == (1.0 if kept else 0.0)


def test_the_slow_bound_is_k_times_the_incumbents_cost_and_time():
    from infrarsi.run.slow import SLOW_MIN, slow_factor

    p = _precision_problem(None)
    searcher = InfraRSISearcher(p, seed=0)
    assert searcher.slow_bound() is None  # nothing ran yet: no trial is cut
    searcher.tell(
        p.baseline, Outcome("ok", ranked_time_per_step_s=0.5, peak_bytes=1e9, cost_s=10.0)
    )
    bound = searcher.slow_bound()
    k = slow_factor(p.noise_var_log)
    assert k >= SLOW_MIN and bound.after_s == pytest.approx(k * 10.0)
    assert bound.censored_step_time_s == pytest.approx(k * 0.5, rel=0.2)
    # a slow outcome is told at its bound: never the incumbent, and the models see it slow
    other = next(c for c in p.candidates if c != p.baseline)
    searcher.tell(
        other,
        Outcome("slow", ranked_time_per_step_s=bound.censored_step_time_s, cost_s=bound.after_s),
    )
    assert searcher.recommend() == p.baseline
    mu = searcher._predict()[0]
    assert mu[p.index[other]] > mu[p.index[p.baseline]] + math.log(1.5)
    assert InfraRSISearcher(p, seed=0, cut_slow=False).slow_bound() is None


def test_the_priors_pick_keeps_the_knobs_no_prior_speaks_of_at_the_baseline():
    """The catalog speaks of patches, the knob prior of the micro-batch (the largest that fits,
    its accumulation following): the pick is the baseline's other knobs with the best patch
    set, never another knob value the candidate list happens to hold first; a value the
    Doctor measured faster here is taken."""
    from infrarsi.run.problem_build import build_problem
    from infrarsi.workloads import find

    manifest = find("dense-1node")
    problem = build_problem(manifest, "tiny", None)
    pick = problem.prior_pick()
    gains = {q for q, r in problem.patch_log_speed.items() if r < 0}
    mb = problem.savers.micro_batch  # the knob prior's: the largest micro-batch that fits
    largest = max(c.knob_dict[mb] for c in problem.candidates)
    assert pick.knob_dict[mb] == largest and pick.patches == gains
    alike = [c for c in problem.candidates if c.knob_dict[mb] == largest and c.patches == gains]
    near = min(distance(c, problem.baseline) for c in alike)  # the other knobs kept where
    assert distance(pick, problem.baseline) == near  # that micro-batch allows
    space = Space.from_levels({"micro_batch": [1, 2, 4], "compile": ["off", "on"]}, ["fast"])
    configs = [
        Config.of({"micro_batch": mb, "compile": c}, p)
        for c in ("on", "off")
        for mb in (4, 1, 2)
        for p in (["fast"], [])
    ]
    base = Config.of({"micro_batch": 2, "compile": "off"})
    measured = lambda cs: np.array(
        [
            -0.2 if c.knob_dict["micro_batch"] == 4 else 0.0  # noqa
            for c in cs
        ]
    )
    plain = Problem(configs, space, base, patch_log_speed={"fast": math.log(0.8)})
    assert plain.prior_pick() == Config.of({"micro_batch": 2, "compile": "off"}, ["fast"])
    told = Problem(
        configs, space, base, patch_log_speed={"fast": math.log(0.8)}, measured_log_speed=measured
    )
    assert told.prior_pick() == Config.of({"micro_batch": 4, "compile": "off"}, ["fast"])


def test_the_trust_region_narrows_after_failures_widens_after_wins_and_bounds_proposals():
    from infrarsi.run import trust as mod
    from infrarsi.run.problem import distance

    p = problem()
    s = InfraRSISearcher(p, seed=0, local=False)
    assert s.trust_radius() == mod.TRUST_RADIUS
    for c in s.start:  # the start counts for the best time, not for the region
        s.tell(c, Outcome("ok", ranked_time_per_step_s=1.0, peak_bytes=1e9, cost_s=5.0))
    assert s.trust_radius() == mod.TRUST_RADIUS
    others = [c for c in p.candidates if c not in s.tried]
    for c in others[: mod.TRUST_FAILURES]:  # none faster than the best measured
        s.tell(c, Outcome("ok", ranked_time_per_step_s=2.0, peak_bytes=1e9, cost_s=5.0))
    assert s.trust_radius() == mod.TRUST_RADIUS - 1
    rest = others[mod.TRUST_FAILURES :]
    for k, c in enumerate(rest[: 2 * mod.TRUST_SUCCESSES]):  # each faster than the last
        s.tell(c, Outcome("ok", ranked_time_per_step_s=0.9 - 0.01 * k, peak_bytes=1e9, cost_s=5.0))
    assert s.trust_radius() == mod.TRUST_RADIUS + 1
    radius, centre = s.trust_radius(), s.recommend()
    assert all(distance(c, centre) <= radius for c in s.ask_batch(3))


def test_a_proposal_for_a_parallel_slot_keeps_away_from_the_trials_in_flight():
    """With trials in parallel, the config in flight is proposed (``tried``) but not measured:
    its neighbours are penalised (local penalisation), so where asking with it merely ruled
    out gives a neighbour, the next slot's proposal is mostly another part of the space — a
    neighbour only when it is far more promising than any other (checked at each step of a
    search)."""
    from infrarsi.run.problem import distance

    s = InfraRSISearcher(problem(), seed=0, local=False)  # the global step's batch
    cases = moved = 0
    for _ in range(16):
        first = s.ask_batch(1)[0]
        s.tried.add(first)  # launched, not told: in flight
        assert s.in_flight() == [first]
        second = s.ask_batch(1)[0]
        s.in_flight = lambda: []  # type: ignore[method-assign]
        ruled_out = s.ask_batch(1)[0]  # ``first`` tried, not penalised as in flight
        del s.in_flight
        if distance(ruled_out, first) <= 1:
            cases += 1
            moved += distance(second, first) > 1
        s.tried.discard(first)
        step, peak = truth(first)
        status = "ok" if peak <= CAPACITY else "oom"
        s.tell(first, Outcome(status, ranked_time_per_step_s=step, peak_bytes=peak, cost_s=5.0))
    assert cases >= 2 and moved >= cases / 2, (cases, moved)


def test_one_free_change_names_the_knob_or_patch_and_ignores_derived_knobs():
    from dataclasses import replace

    from infrarsi.run.problem import free_change

    p = replace(problem(), derived=("accum",))
    base = Config.of({"micro_batch": 2, "accum": 4, "threads": 1, "ckpt": False})
    assert free_change(p, base, Config.of({**base.knob_dict, "threads": 2})) == "threads"
    # the accumulation follows the micro-batch: one change, not two
    assert free_change(p, base, Config.of({**base.knob_dict, "micro_batch": 4, "accum": 2})) == (
        "micro_batch"
    )
    assert free_change(p, base, Config.of(base.knob_dict, ["fast"])) == "fast"
    assert free_change(p, base, base) is None
    assert free_change(p, base, Config.of({**base.knob_dict, "threads": 2}, ["fast"])) is None


def test_with_cover_each_free_knob_and_patch_is_compared_alone_before_the_model_exploits(
    monkeypatch,
):
    """After the start, while some free knob or patch has never been compared alone, each
    proposal (but a drift re-measure of the baseline) is the incumbent changed in one such
    dimension; by the end every one has been."""
    from dataclasses import replace

    from infrarsi.run import infrarsi_searcher as mod
    from infrarsi.run import problem as problem_mod
    from infrarsi.run.problem import free_change

    monkeypatch.setattr(mod, "COVER", True)
    monkeypatch.setattr(mod, "N_SEEDS", 1)
    monkeypatch.setattr(problem_mod, "MICRO_BATCH_PRIOR_LOG", 0.0)  # the start: the baseline
    p = replace(problem(), derived=("accum",))  # the accumulation follows the micro-batch
    s = InfraRSISearcher(p, seed=0, local=False)
    dims = {"micro_batch", "threads", "ckpt", "fast", "lean"}
    rng = np.random.default_rng(0)
    covering = 0
    for _ in range(len(s.start) + 10):
        started = all(c in s.tried for c in s.start)
        expected, centre = (s._cover(), s.recommend()) if started else (None, None)
        config = s.ask()
        if expected is not None and config != p.baseline:
            assert config == expected and free_change(p, config, centre) in dims
            covering += 1
        s.tell(config, outcome_of(config, rng))
    ok = [c for c, o in s.history if o.status.is_ok()]
    assert dims == {free_change(p, a, b) for a in ok for b in s.tried if a != b} - {None}
    assert covering >= 3, covering
    assert s._cover() is None  # nothing left open


def test_the_local_search_walks_the_incumbents_neighbourhood_and_measures_nothing_twice():
    """After the start, each proposal but the drift check's baseline is untried and one free
    change from the incumbent (the accumulation follows the micro-batch), unless the
    neighbourhood is spent (it widens) or the models jump to a far config; the walk finds the
    toy problem's fastest config that fits."""
    from dataclasses import replace

    from infrarsi.run.local import free_codes

    p = replace(problem(), derived=("accum",))
    s = InfraRSISearcher(p, seed=0, local=True)
    codes = free_codes(p.candidates, ["micro_batch", "threads", "ckpt"], ["fast", "lean"])
    rng = np.random.default_rng(0)
    near = 0
    for _ in range(len(s.start) + 14):
        started = all(c in s.tried for c in s.start)
        centre = s.recommend() if started else None
        config = s.ask()
        if centre is not None and config != p.baseline:
            assert config not in s.tried, "the search measures no config twice"
            changes = int((codes[p.index[config]] != codes[p.index[centre]]).sum())
            near += changes == 1
        s.tell(config, outcome_of(config, rng))
    assert near >= 6, near
    fits = [c for c in p.candidates if truth(c)[1] <= CAPACITY]
    assert truth(s.recommend())[0] == min(truth(c)[0] for c in fits)


def test_the_grid_runs_the_largest_micro_batch_that_fits_first_in_an_order_of_each_seeds():
    orders = []
    for seed in range(4):
        grid = registry.make("grid", problem(), seed)
        asked = [c for c in grid.order if c != grid.problem.baseline]
        levels = [c.knob_dict["micro_batch"] for c in asked]
        assert levels == sorted(levels, reverse=True)  # the largest that fits, first
        assert all(truth(c)[1] * 1.1 <= CAPACITY for c in asked)  # what does not fit: pruned
        orders.append(tuple(asked))
    assert len(set(orders)) == 4  # ties broken by the seed: four seeds, four orders


def test_the_analytic_formula_is_scaled_by_the_baselines_measured_peak():
    """A formula 10% high everywhere prunes configs that fit; the Doctor's measured peak of
    the baseline scales it, and they are candidates again (the patches' ratios untouched)."""
    configs = problem().candidates
    high = lambda cs: np.array([[math.log(truth(c)[1] * 1.25), 0.0] for c in cs])  # noqa: E731
    kw = dict(capacity_bytes=CAPACITY, analytic_log_peak=high)
    space = problem().space
    raw = Problem(configs, space, configs[0], **kw)
    measured = Problem(configs, space, configs[0], baseline_peak_bytes=truth(configs[0])[1], **kw)
    fits = np.array([truth(c)[1] <= CAPACITY * math.exp(-0.05) for c in configs])
    assert (raw.analytic_fits() < fits).any()  # the raw formula pruned some that fit
    assert (measured.analytic_fits() == fits).all()
    assert measured.offsets[:, 1].tolist() == raw.offsets[:, 1].tolist()


@pytest.mark.parametrize("unsteady", [False, True])
def test_the_baseline_is_measured_again_mid_search_only_on_a_host_the_doctor_judged_unsteady(
    unsteady,
):
    p = problem()
    p.unsteady = unsteady
    asked = run(InfraRSISearcher(p, seed=1), 24)
    again = asked[1:].count(p.baseline)
    assert (again > 0) is unsteady, again


def test_under_a_budget_in_trials_a_proposal_is_scored_per_trial_and_oom_risk_is_capped():
    p = problem()
    searcher = InfraRSISearcher(p, seed=2)
    rng = np.random.default_rng(2)
    risks = []
    for _ in range(16):
        config = searcher.ask()
        if config is None:
            break
        if searcher.last is not None and searcher.history:
            mu, _, _, _, incumbent = searcher._predict()
            base = mu[p.index[p.baseline]]
            if incumbent is not None and mu[incumbent] < base - searcher._stop_effect():
                risks.append(searcher.last.p_oom)  # proposed once the target region is found
        searcher.tell(config, outcome_of(config, rng))
    acq, log_ei, p_oom, _ = searcher._acquisition()
    fit = np.log(np.clip(1 - p_oom, 1e-12, 1.0))
    assert np.allclose(acq, log_ei + fit)  # no wall-time term: every trial counts as one
    assert risks and max(risks) <= 0.3 + 1e-9
    p.per_trial = False  # a budget in seconds: per expected second
    searcher._cache = None
    assert not np.allclose(searcher._acquisition()[0], log_ei + fit)


@pytest.mark.parametrize("doubling, kept", [(1.5, False), (0.7, True)])
def test_the_micro_batch_prior_starts_the_search_and_its_trials_overrule_it(doubling, kept):
    """The knob prior (a larger micro-batch faster at a fixed global batch) puts the largest
    micro-batch the estimate admits among the starts; on a host where each doubling is
    slower, the trials overrule it (the model's mean is the prior plus what the trials say)
    and the search ends at the smallest; where it holds, at the largest that fits."""
    p = problem()
    fits = [c for c, f in zip(p.candidates, p.analytic_fits()) if f]
    assert p.prior_pick().knob_dict["micro_batch"] == max(c.knob_dict["micro_batch"] for c in fits)

    def truth_s(config):
        return 1.0 * doubling ** math.log2(config.knob_dict["micro_batch"])

    searcher = InfraRSISearcher(p, seed=0)
    _ask_tell(searcher, 14, truth_s)
    best = searcher.recommend().knob_dict["micro_batch"]
    assert best == (max(c.knob_dict["micro_batch"] for c in fits) if kept else 1)


def test_threads_past_the_cores_are_claimed_slower_and_the_launchers_default_claims_nothing():
    from infrarsi.run.problem import Parallelism, oversubscription

    par = Parallelism(ranks="nproc", threads="threads", nodes=2, cores=4)
    assert oversubscription(Config.of({"nproc": 1, "threads": 2}), par) == 0.0  # 4 on 4
    assert oversubscription(Config.of({"nproc": 2, "threads": 2}), par) == 1.0  # 8 on 4
    assert oversubscription(Config.of({"nproc": 4, "threads": 0}), par) == 0.0  # default
    assert oversubscription(Config.of({"nproc": 4, "threads": 4}), Parallelism()) == 0.0
    configs = [
        Config.of({"nproc": r, "threads": t}) for r, t in itertools.product([1, 2], [0, 1, 2, 4])
    ]
    space = Space.from_levels({"nproc": [1, 2], "threads": [0, 1, 2, 4]}, [])
    problem = Problem(configs, space, configs[0], parallelism=Parallelism("nproc", "threads", 1, 2))
    claimed = dict(zip(problem.candidates, problem.prior_log_ratio()))
    assert claimed[Config.of({"nproc": 2, "threads": 4})] == pytest.approx(2 * math.log(1.5))
    assert claimed[Config.of({"nproc": 2, "threads": 1})] == 0.0
    assert problem.knob_prior_names == ("threads",)


def test_a_workloads_ranks_threads_and_nodes_are_read_from_its_manifest():
    from infrarsi.run.problem_build import parallelism
    from infrarsi.workloads import find

    par = parallelism(find("dense-2node"), None)
    assert (par.ranks, par.threads, par.nodes, par.cores) == ("nproc", "threads_per_rank", 2, None)


def test_what_the_baseline_measurably_used_at_this_capacity_fits_whatever_the_margin():
    """The calibrated estimate of the baseline is its measured peak: at a capacity set at that
    peak the margin would call the baseline itself unfit; what it used fits, and so does any
    config estimated no larger (a larger one still does not)."""
    configs = problem().candidates
    base = configs[0]
    at_base = truth(base)[1]
    kw = dict(analytic_log_peak=lambda cs: np.log([truth(c)[1] for c in cs]))  # noqa: E731
    raw = Problem(configs, problem().space, base, capacity_bytes=at_base, **kw)
    measured = Problem(
        configs, problem().space, base, capacity_bytes=at_base, baseline_peak_bytes=at_base, **kw
    )
    fits = measured.analytic_fits()
    assert not raw.analytic_fits()[raw.index[base]] and fits[measured.index[base]]
    assert all(fits[i] == (truth(c)[1] <= at_base) for i, c in enumerate(measured.candidates))


def test_once_the_target_is_found_no_untried_config_over_the_cap_is_proposed_even_when_all_are():
    """A space whose every config sits at the capacity (the runtime's memory, as a drafted
    script's is): once the incumbent beats the baseline every untried config is a coin flip
    to run out of memory, over the cap — the trial re-measures a top config instead
    (``CAP_HOLDS``); after the start (the baseline and the priors' pick, which the analytic
    formula says fit) no new config carries more than the cap of its moment."""
    import infrarsi.run.infrarsi_searcher as searcher_module

    p = problem()
    p.analytic_log_peak = lambda cs: np.full(len(cs), math.log(CAPACITY))
    searcher = InfraRSISearcher(p, seed=0, local=False)
    rng = np.random.default_rng(0)
    capped_then, over = [], []
    for _ in range(16):
        config = searcher.ask()
        if config is None:
            break
        fresh = config not in searcher.tried
        started = all(c in searcher.tried for c in searcher.start)
        if started and searcher.last is not None and fresh:
            mu, _, _, _, incumbent = searcher._predict()
            cap = searcher._p_oom_cap(incumbent)
            if searcher.last.p_oom > cap:
                over.append((config.describe(), searcher.last.p_oom, cap))
        if not fresh and searcher._capped:
            capped_then.append(config)
        step, _ = truth(config)
        searcher.tell(
            config,
            Outcome(
                "ok",
                ranked_time_per_step_s=step * math.exp(rng.normal(0, 0.02)),
                peak_bytes=CAPACITY * 0.999,
                cost_s=5.0,
            ),
        )
    assert searcher_module.CAP_HOLDS and searcher_module.P_OOM_MAX <= 0.6
    assert over == []
    assert capped_then, "the cap never held everything back: the case is not exercised"


def test_a_start_point_that_ran_out_of_memory_is_followed_by_its_memory_saving_variant(
    monkeypatch,
):
    """An analytic formula that misses much of the activations: the priors' pick (the largest
    micro-batch it admits) runs out of memory; the next trial is that pick with one memory
    saver at its micro-batch (checkpointing, a leaner patch: ``pairing.RESCUE``), under the
    P(OOM) cap, and only once."""
    import infrarsi.run.infrarsi_searcher as searcher_module
    import infrarsi.run.pairing as pairing

    assert pairing.RESCUE and pairing.RESCUE_KEEPS_MICRO_BATCH
    p = problem(analytic_scale=0.6)
    searcher = InfraRSISearcher(p, seed=0)
    rng = np.random.default_rng(0)
    asked = []
    for _ in range(3):
        config = searcher.ask()
        asked.append(config)
        searcher.tell(config, outcome_of(config, rng))
    baseline, pick, after = asked
    assert baseline == p.baseline and truth(pick)[1] > CAPACITY  # the pick ran out of memory
    assert after in memory_savers(p, pick), after.describe()
    assert after.knob_dict["micro_batch"] == pick.knob_dict["micro_batch"]
    assert searcher.last is not None and searcher.last.p_oom <= searcher_module.P_OOM_MAX
    assert searcher._rescue() is None  # one of its variants was tried: no second rescue
