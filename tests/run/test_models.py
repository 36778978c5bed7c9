"""The Run stage's models on synthetic data whose truth is known (pure functions, fast)."""

import numpy as np
import pytest
from scipy import optimize, stats

from infrarsi.run.cost import TrialCostModel
from infrarsi.run.memory import MemoryObservation, TobitMemoryModel, _neg_log_posterior
from infrarsi.run.space import Config, Space
from infrarsi.run.steptime import StepTimeModel


def synthetic(n, seed=0, d=4, sigma=0.03):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    beta = np.array([0.4, -0.3, 0.2, 0.0])[:d]
    log_peak = 20.0 + X @ beta + rng.normal(0, sigma, n)
    return X, beta, log_peak


def observe(log_peak, cap):
    return [
        MemoryObservation(float(np.exp(min(lp, np.log(cap)))), bool(lp > np.log(cap)))
        for lp in log_peak
    ]


def test_the_likelihood_gradient_is_exact():
    X, _, log_peak = synthetic(30)
    cap = np.exp(np.quantile(log_peak, 0.6))
    obs = observe(log_peak, cap)
    Z = np.hstack([np.ones((30, 1)), X])
    y = np.log([o.peak_or_cap_bytes for o in obs])
    cens = np.array([o.censored for o in obs])
    args = (Z, y, cens, np.full(30, 19.9), np.full(5, 3.0), 0.05)
    theta = np.r_[0.1, 0.2, -0.1, 0.3, 0.0, np.log(0.07)]
    error = optimize.check_grad(
        lambda t: _neg_log_posterior(t, *args)[0], lambda t: _neg_log_posterior(t, *args)[1], theta
    )
    assert error < 1e-4 * np.linalg.norm(_neg_log_posterior(theta, *args)[1])


def test_censoring_recovers_what_dropping_ooms_gets_wrong():
    X, beta, log_peak = synthetic(300, seed=1, sigma=0.15)
    cap = np.exp(np.quantile(log_peak, 0.6))  # 40% of trials run out of memory
    obs = observe(log_peak, cap)
    offset = np.full(len(obs), 20.0)
    censored = TobitMemoryModel(ridge=0.1).fit(X, obs, offset)
    kept = [i for i, o in enumerate(obs) if not o.censored]
    dropped = TobitMemoryModel(ridge=0.1).fit(X[kept], [obs[i] for i in kept], offset[kept])
    Xt, _, truth = synthetic(3000, seed=11, sigma=0.15)
    offset_t = np.full(3000, 20.0)
    above = truth > np.log(cap)  # the configs that need more than the cap
    under = {
        name: np.mean(truth[above] - m.predict_log(Xt, offset_t)[0][above])
        for name, m in (("censored", censored), ("dropped", dropped))
    }
    assert under["censored"] < 0.07 and under["dropped"] > 0.1, under  # dropping OOMs forgets them
    brier = {
        name: np.mean((m.p_oom(Xt, cap, offset_t) - above) ** 2)
        for name, m in (("censored", censored), ("dropped", dropped))
    }
    assert brier["censored"] < brier["dropped"], brier
    assert censored.n_censored_ == sum(o.censored for o in obs)
    assert f"censored={censored.n_censored_}" in repr(censored)


def test_p_oom_is_calibrated_and_wider_away_from_the_data():
    X, _, log_peak = synthetic(60, seed=2)
    cap = np.exp(np.quantile(log_peak, 0.7))
    model = TobitMemoryModel().fit(X, observe(log_peak, cap), np.full(60, 20.0))
    Xt, _, lt = synthetic(2000, seed=3)
    p = model.p_oom(Xt, cap, np.full(2000, 20.0))
    truth = lt > np.log(cap)
    assert np.mean((p - truth) ** 2) < 0.08  # Brier
    assert abs(p.mean() - truth.mean()) < 0.05
    near = model.predict_log(X[:1], np.full(1, 20.0))[1][0]
    far = model.predict_log(X[:1] * 6, np.full(1, 20.0))[1][0]
    assert far > near


def test_offset_parts_let_trials_discount_an_overstated_catalog_prior():
    # the catalog says each of 8 patches cuts the peak by 5-20%; really by a fifth of that.
    # With 12 trials the per-patch corrections are underdetermined; one coefficient on the
    # catalog's part is not.
    brier = {"summed": [], "parts": []}
    for seed in range(20):
        rng = np.random.default_rng(seed)
        n, d = 12, 8
        X = rng.integers(0, 2, size=(n + 200, d)).astype(float)
        formula = 19.5 + rng.normal(0, 0.2, n + 200)
        catalog = X @ rng.uniform(-0.2, -0.05, d)
        truth = formula + 0.2 * catalog + rng.normal(0, 0.02, n + 200)
        cap = np.exp(np.quantile(truth, 0.6))
        obs, test = observe(truth[:n], cap), truth[n:] > np.log(cap)
        parts = np.c_[formula, catalog]
        summed = TobitMemoryModel().fit(X[:n], obs, parts[:n].sum(axis=1))
        split = TobitMemoryModel().fit(X[:n], obs, parts[:n])
        brier["summed"].append(
            np.mean((summed.p_oom(X[n:], cap, parts[n:].sum(axis=1)) - test) ** 2)
        )
        brier["parts"].append(np.mean((split.p_oom(X[n:], cap, parts[n:]) - test) ** 2))
    assert np.mean(brier["parts"]) < np.mean(brier["summed"])
    with pytest.raises(ValueError, match="offset part"):
        split.p_oom(X[n:], cap, parts[n:].sum(axis=1)[:, None])


def test_without_an_analytic_offset_it_learns_an_intercept():
    X, _, log_peak = synthetic(40, seed=4)
    model = TobitMemoryModel().fit(X, observe(log_peak, np.exp(99.0)))
    assert abs(model.beta_[0] - 20.0) < 0.1
    assert model.n_censored_ == 0


def test_an_unfitted_model_says_so_and_an_empty_fit_falls_back_on_the_prior():
    assert "unfitted" in repr(TobitMemoryModel())
    model = TobitMemoryModel().fit(np.zeros((0, 3)), [], np.zeros(0))
    mean, sd = model.predict_log(np.zeros((1, 3)), np.array([np.log(1e9)]))
    assert mean[0] == pytest.approx(np.log(1e9)) and sd[0] > 0.05


@pytest.mark.parametrize("family", ["gp", "forest"])
def test_step_time_families_rank_held_out_configs(family):
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, size=(80, 3))
    t = np.exp(-1.0 + 0.5 * X[:, 0] - 0.3 * X[:, 1] ** 2 + 0.2 * (X[:, 2] > 0))
    model = StepTimeModel(family).fit(X[:50], t[:50] * np.exp(rng.normal(0, 0.02, 50)))
    rho = stats.spearmanr(model.predict_step_time_s(X[50:]), t[50:]).statistic
    assert rho > 0.8
    mean, sd = model.predict_log(X[50:])
    assert np.all(sd > 0)


@pytest.mark.parametrize("seed", [0, 1])
def test_noisy_trials_do_not_make_an_untried_config_known(seed):
    """Nine trials whose spread is no more than their noise (the moe-1node AMD 1-core replay's
    situation): the evidence alone drives the GP's signal variance to its lower bound, and every
    untried config came out predicted to within 1% (sd 0.008-0.009 in log time on these two
    draws) — no trial was worth spending on it. With the signal's floor the fit may still call
    the surface flat (long length scales), but not known: an untried config keeps several
    percent of uncertainty (0.04-0.05 here)."""
    rng = np.random.default_rng(seed)
    X = np.array([[a, b, c] for a in (0, 1) for b in (0, 1, 2) for c in (0, 1)], dtype=float)
    tried = [0, 1, 2, 3, 5, 6, 7, 9, 10]
    t = np.exp(-0.2 + rng.normal(0, 0.13, len(tried)))
    model = StepTimeModel("gp").fit(X[tried], t, np.full(len(tried), 0.018))
    untried = [i for i in range(len(X)) if i not in tried]
    _, sd = model.predict_log(X[untried])
    assert np.all(sd >= 0.03), sd


@pytest.mark.parametrize("true_weight", [0.0, 1.0])
def test_a_prior_columns_weight_is_read_from_the_trials_with_the_kernel_marginalised(true_weight):
    """``basis_weight``: trials made of ``true_weight`` times a prior column plus a smooth
    surface and noise; the posterior weight comes out near the truth and its sd below the
    prior's. A column constant over the trials leaves the prior (1, sd 1) as it was."""
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 1, (14, 2))
    basis = np.where(rng.uniform(size=14) < 0.5, -0.3, 0.3)
    y = true_weight * basis + 0.1 * np.sin(3 * X[:, 0]) + rng.normal(0, 0.02, 14)
    noise = np.full(14, 0.02**2)
    model = StepTimeModel("gp").fit(X, np.exp(y - basis), noise)  # fitted as if it held
    mean, sd = model.basis_weight(X, y, basis, noise, prior_sd=1.0)
    assert abs(mean - true_weight) < 0.25 and sd < 0.3, (mean, sd)
    # a column that claims the same for every trial tried says nothing the intercept does not
    mean, sd = model.basis_weight(X, y, np.full(14, 0.3), noise, prior_sd=1.0)
    assert abs(mean - 1.0) < 1e-3 and abs(sd - 1.0) < 1e-3, (mean, sd)
    assert (
        StepTimeModel("forest").fit(X, np.exp(y), noise).basis_weight(X, y, basis, noise, 1.0)
        is None
    )


def test_step_time_family_is_checked():
    with pytest.raises(ValueError, match="family"):
        StepTimeModel("boosting")


def test_trial_cost_pays_the_oom_share():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(40, 2))
    oom = rng.uniform(size=40) < 0.3
    cost = np.exp(2.0 + 0.3 * X[:, 0] - 0.5 * oom)
    model = TrialCostModel().fit(X, cost, oom)
    ok, sure_oom = model.predict_cost_s(X[:1], 0.0), model.predict_cost_s(X[:1], 1.0)
    assert sure_oom[0] < ok[0]
    assert model.predict_cost_s(X[:1], 0.5)[0] == pytest.approx((ok[0] + sure_oom[0]) / 2)


def test_space_encodes_numbers_booleans_choices_and_patches():
    space = Space.from_levels(
        {"micro_batch": ["1", "2", "4"], "precision": ["fp32", "bf16"], "ckpt": ["False", "True"]},
        ["b", "a"],
    )
    assert space.column_names() == ["micro_batch", "precision=fp32", "ckpt", "+a", "+b"]
    X = space.encode(
        [
            Config.of({"micro_batch": 4, "precision": "fp32", "ckpt": True}, ["a"]),
            Config.of({"micro_batch": 1, "precision": "bf16", "ckpt": False}),
        ]
    )
    assert X.shape == (2, 5)
    assert X[0, 0] > X[1, 0] and X[0, 2] > X[1, 2] and X[0, 3] > X[1, 3] and X[0, 4] == X[1, 4]


def test_the_ridge_is_chosen_by_the_evidence_of_the_trials():
    """Many trials of a strong real effect: a loose ridge; a few noisy trials of no effect:
    a tight one. The chosen value is a fitted attribute and shows in the repr."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    strong = [
        MemoryObservation(float(np.exp(20 + 0.5 * x[0] + rng.normal(0, 0.02))), False) for x in X
    ]
    loose = TobitMemoryModel(ridge=(1.0, 500.0)).fit(X, strong)
    assert loose.ridge_ == 1.0 and "ridge=1" in repr(loose)
    flat = [MemoryObservation(float(np.exp(20 + rng.normal(0, 0.1))), False) for _ in X[:8]]
    tight = TobitMemoryModel(ridge=(1.0, 500.0)).fit(X[:8], flat)
    assert tight.ridge_ == 500.0


def test_the_formula_alone_is_kept_where_the_trials_bear_it_out(monkeypatch):
    """With ``FORMULA_ALONE`` (off: it did not pay on the tables): peaks that are the
    analytic formula's within its 10% spread — nothing fitted beats the formula by evidence,
    so the model is the formula (its P(OOM) the formula's); peaks that a knob moves away from
    the formula — the fitted model is kept."""
    from scipy import special

    from infrarsi.run import memory

    monkeypatch.setattr(memory, "FORMULA_ALONE", True)
    rng = np.random.default_rng(3)
    X = rng.normal(size=(12, 4))
    offset = 20.0 + 0.3 * X[:, 1]  # the formula knows knob 1's effect
    cap = float(np.exp(20.1))
    as_said = observe(offset + rng.normal(0, 0.1, len(X)), cap)
    formula = TobitMemoryModel().fit(X, as_said, offset)
    assert formula.formula_alone_ and "ridge=inf" in repr(formula)
    Xt = rng.normal(size=(50, 4))
    offset_t = 20.0 + 0.3 * Xt[:, 1]
    expected = special.ndtr((offset_t - np.log(cap)) / formula.sigma_prior)
    assert np.allclose(formula.p_oom(Xt, cap, offset_t), expected)
    moved = observe(offset + 0.5 * X[:, 0] + rng.normal(0, 0.02, len(X)), cap)
    fitted = TobitMemoryModel().fit(X, moved, offset)
    assert not fitted.formula_alone_ and fitted.beta_[1] > 0.3
