"""Peak memory per rank, learned from trials where an out-of-memory trial is right-censored.

A trial that ran tells its peak; a trial that ran out of memory at capacity ``C`` tells only
that its peak was above ``C``. The model is a Tobit (censored Gaussian) regression on the log of
the peak:

    log peak = offset + X @ beta + eps,   eps ~ N(0, sigma^2)

``offset`` is the log of the analytic estimate (runtime, parameters, gradients, optimizer state,
activations — the manifest's ``memory`` formula — times the patches' prior ratios), so the
learned ``beta`` only corrects it, under a ridge prior whose strength the trials choose. ``X``
also carries the centred offset itself, whose coefficient (prior mean 0, i.e. slope 1) lets
the trials say that the formula over- or under-states how much the knobs move the peak (a
runtime it does not know dilutes every effect). The offset may come in parts (columns: the
formula, the patch catalog's prior
ratios): each part's centred value is then a column too, so the trials can say "the catalog's
memory ratios are overstated here" with one coefficient instead of one per patch (on the dense
table at 20 trials: Brier 0.198 -> 0.184). Without an analytic estimate the offset is 0 and an
intercept is learned. The likelihood is written once with ``scipy.special.log_ndtr``
and minimised by L-BFGS-B with its analytic gradient; a Laplace approximation around the optimum
gives the uncertainty of ``beta``, so an unseen combination gets an honest, wider ``P(OOM)``.
``timeout`` and ``crash`` trials carry no memory information and never enter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import optimize, special

from infrarsi.run.space import single_threaded

Array = NDArray[np.float64]  # the models' vectors and matrices
Mask = NDArray[np.bool_]  # which observations are censored

LOG_2PI = float(np.log(2 * np.pi))
RIDGE_GRID = (20.0, 50.0, 100.0, 200.0, 500.0)
# the analytic formula alone (nothing fitted) competing with the fitted models by evidence:
# off — on the 20 tables of bench/data (bench/models.py --quick, 4 splits) it helped where the
# formula is good (dense-1node-full Brier 0.112 -> 0.097) and cost more elsewhere (mean over the
# 22 table-size rows 0.116 -> 0.124; moe-2node-threads at 20 trials 0.131 -> 0.176)
FORMULA_ALONE = False


@dataclass(frozen=True)
class MemoryObservation:
    """One trial's memory evidence: the peak (bytes) or, when ``censored``, the cap it exceeded."""

    peak_or_cap_bytes: float
    censored: bool


class TobitMemoryModel:
    """Censored Gaussian regression of log peak memory; ``fit`` returns the model.

    ``ridge``: prior precision of each standardised correction — one value, or several of
    which the fit keeps the one the trials make most likely (Laplace evidence; ``ridge_``).
    The default grid replaced a fixed 20 (40 splits x 3 capacities, Brier on held-out cells:
    dense-1node 20 trials 0.184 -> 0.152, 40 trials 0.136 -> 0.134; moe-1node 20 trials 0.118
    -> 0.111, 40 trials 0.079 -> 0.088): with peaks within ~5% of one another around the
    capacity, a loose fixed ridge let a few censored trials tilt every correction.
    ``sigma_prior``: the prior median of the residual scale in log space (0.1 = 10% model and
    run-to-run error), held with ``sigma_prior_sd`` (log space): with few trials a free scale
    shrinks and the model grows overconfident (measured on the moe-1node table at 20 trials:
    Brier 0.14 with a loose prior, 0.115 with this one; unchanged at 40).
    """

    def __init__(
        self,
        ridge: float | tuple[float, ...] = RIDGE_GRID,
        sigma_prior: float = 0.1,
        intercept_ridge: float = 1.0,
        slope_ridge: float = 4.0,
        sigma_prior_sd: float = 0.15,
    ):
        self.ridge = ridge
        self.sigma_prior = sigma_prior
        self.intercept_ridge = intercept_ridge
        self.slope_ridge = slope_ridge
        self.sigma_prior_sd = sigma_prior_sd

    def __repr__(self) -> str:
        if not hasattr(self, "beta_"):
            return f"TobitMemoryModel(ridge={self.ridge}, unfitted)"
        return (
            f"TobitMemoryModel(n={self.n_obs_}, censored={self.n_censored_}, "
            f"sigma={self.sigma_:.3f}, ridge={self.ridge_:g})"
        )

    @single_threaded
    def fit(
        self,
        X: np.ndarray,
        observations: list[MemoryObservation],
        offset_log: np.ndarray | None = None,
    ) -> TobitMemoryModel:
        """Fit on encoded configs ``X`` (n, d), their observations and log analytic offsets
        ``(n,)`` — or offset parts ``(n, k)`` that add up to the offset."""
        X = np.asarray(X, dtype=float)
        n = len(observations)
        y = np.log([o.peak_or_cap_bytes for o in observations]) if n else np.zeros(0)
        cens = np.array([o.censored for o in observations], dtype=bool)
        self.has_offset_ = offset_log is not None
        parts = self._parts(offset_log, n)
        self.parts_center_ = (
            parts.mean(axis=0) if n and parts.shape[1] > 1 else np.zeros(parts.shape[1])
        )
        X = self._with_parts(X, parts)
        offset = parts.sum(axis=1)
        self.offset_center_ = float(np.mean(offset)) if n else 0.0
        Z = self._design(X, offset)
        self.n_obs_, self.n_censored_ = n, int(cens.sum())
        fits = [
            self._fit_one(Z, y, cens, offset, r)
            for r in np.atleast_1d(np.asarray(self.ridge, dtype=float))
        ]
        best = max(fits, key=lambda f: f[0])  # the ridge the trials make most likely
        if self.has_offset_ and n and FORMULA_ALONE:
            alone = self._formula_alone(Z, y, cens, offset)
            if alone[0] > best[0]:
                best = alone
        _, self.ridge_, self.beta_, self.sigma_, self.cov_, self.converged_ = best
        self.formula_alone_ = bool(np.isinf(self.ridge_))
        return self

    def _formula_alone(
        self, Z: Array, y: Array, cens: Mask, offset: Array
    ) -> tuple[float, float, Array, float, Array, bool]:
        """The analytic formula alone as a model with nothing to fit: log peak = offset +
        noise of the prior's scale (``sigma_prior``); its evidence is its likelihood. Kept
        when the trials make it more likely than every fitted model (their Laplace evidence
        pays for what they fit), so the model is the formula where the formula is good."""
        sigma = self.sigma_prior
        obs = ~cens
        r = (y[obs] - offset[obs]) / sigma
        z = (offset[cens] - y[cens]) / sigma
        loglik = float(
            np.sum(-0.5 * r * r - np.log(sigma) - 0.5 * LOG_2PI) + np.sum(special.log_ndtr(z))
        )
        k = Z.shape[1]
        return loglik, float("inf"), np.zeros(k), sigma, np.zeros((k, k)), True

    def _fit_one(
        self, Z: Array, y: Array, cens: Mask, offset: Array, ridge: float
    ) -> tuple[float, float, Array, float, Array, bool]:
        """One fit at one ridge: (Laplace log evidence, ridge, beta, sigma, cov, converged)."""
        precision = np.r_[
            self.intercept_ridge if self.has_offset_ else 1e-6,
            np.full(Z.shape[1] - 1 - self.has_offset_, ridge),
        ]
        if self.has_offset_:
            precision = np.r_[precision, self.slope_ridge]
        start = _ridge_start(Z, y - offset, precision, self.sigma_prior)
        args = (Z, y, cens, offset, precision, self.sigma_prior, self.sigma_prior_sd)
        converged = True
        if len(y) == 0:
            theta = start
        else:
            result = optimize.minimize(
                _neg_log_posterior, start, jac=True, method="L-BFGS-B", args=args
            )
            theta, converged = result.x, bool(result.success)
        beta, sigma = theta[:-1], float(np.exp(theta[-1]))
        hessian = _hessian(Z, y, cens, offset, beta, sigma, precision)
        # Laplace: log p(y) ~ -f(theta*) + log|prior precision|/2 - log|H|/2 (2 pi terms cancel)
        evidence = (
            -_neg_log_posterior(theta, *args)[0]
            + 0.5 * np.sum(np.log(precision))
            - 0.5 * np.linalg.slogdet(hessian)[1]
        )
        return float(evidence), ridge, beta, sigma, np.linalg.pinv(hessian), converged

    @staticmethod
    def _parts(offset_log: Array | None, n: int) -> np.ndarray:
        if offset_log is None:
            return np.zeros((n, 1))
        parts = np.asarray(offset_log, dtype=float)
        out: Array = parts[:, None] if parts.ndim == 1 else parts
        return out

    def _with_parts(self, X: np.ndarray, parts: np.ndarray) -> np.ndarray:
        """X and, with more than one offset part, each part's centred value."""
        if parts.shape[1] < 2:
            return X
        return np.hstack([X, parts - self.parts_center_])

    def _design(self, X: np.ndarray, offset: np.ndarray) -> np.ndarray:
        """[1, X] and, with an analytic estimate, its centred log as a last column."""
        Z = np.hstack([np.ones((len(X), 1)), np.asarray(X, dtype=float)])
        if self.has_offset_:
            Z = np.hstack([Z, (offset - self.offset_center_)[:, None]])
        return Z

    @single_threaded
    def predict_log(
        self, X: np.ndarray, offset_log: np.ndarray | None = None
    ) -> tuple[Array, Array]:
        """Mean and standard deviation of log peak bytes for encoded configs (noise included)."""
        if (offset_log is None) == self.has_offset_:
            raise ValueError(
                "give the analytic offsets exactly when the model was fitted with them"
            )
        parts = self._parts(offset_log, len(X))
        if parts.shape[1] != len(self.parts_center_):
            raise ValueError(
                f"{parts.shape[1]} offset part(s); the model was fitted with "
                f"{len(self.parts_center_)}"
            )
        offset = parts.sum(axis=1)
        Z = self._design(self._with_parts(np.asarray(X, dtype=float), parts), offset)
        mean: Array = offset + Z @ self.beta_
        var_param = np.einsum("ij,jk,ik->i", Z, self.cov_, Z)
        sd: Array = np.sqrt(np.maximum(var_param, 0.0) + self.sigma_**2)
        return mean, sd

    def predict_peak_bytes(self, X: Array, offset_log: Array | None = None) -> np.ndarray:
        """The median predicted peak per rank, in bytes."""
        return np.asarray(np.exp(self.predict_log(X, offset_log)[0]), dtype=float)

    def p_oom(self, X: Array, capacity_bytes: float, offset_log: Array | None = None) -> np.ndarray:
        """P(peak > capacity) for each encoded config."""
        mean, sd = self.predict_log(X, offset_log)
        return np.asarray(special.ndtr((mean - np.log(capacity_bytes)) / sd), dtype=float)


def _ridge_start(Z: Array, target: Array, precision: Array, sigma_prior: float) -> np.ndarray:
    """Ridge least squares with each censored value taken at its bound: where the optimiser
    starts (it then needs a few dozen iterations instead of hundreds)."""
    if len(target) == 0:
        return np.asarray(np.r_[np.zeros(Z.shape[1]), np.log(sigma_prior)], dtype=float)
    beta = np.linalg.solve(Z.T @ Z + np.diag(precision), Z.T @ target)
    resid = float(np.sqrt(np.mean((target - Z @ beta) ** 2)))
    return np.asarray(np.r_[beta, np.log(max(resid, sigma_prior / 4))], dtype=float)


def _inverse_mills(z: np.ndarray) -> np.ndarray:
    """phi(z) / Phi(z), computed stably in log space (about -z far in the left tail)."""
    z = np.clip(z, -1e6, 1e6)
    return np.asarray(np.exp(-0.5 * z * z - 0.5 * LOG_2PI - special.log_ndtr(z)), dtype=float)


def _neg_log_posterior(
    theta: Array,
    Z: Array,
    y: Array,
    cens: Mask,
    offset: Array,
    precision: Array,
    sigma_prior: float,
    sigma_prior_sd: float = 1.0,
) -> tuple[float, Array]:
    """Negative log posterior of (beta, log sigma) and its gradient."""
    beta, log_sigma = theta[:-1], theta[-1]
    sigma = np.exp(log_sigma)
    mu = offset + Z @ beta
    obs = ~cens
    r = (y[obs] - mu[obs]) / sigma
    z = (mu[cens] - y[cens]) / sigma
    loglik = np.sum(-0.5 * r * r - log_sigma - 0.5 * LOG_2PI) + np.sum(special.log_ndtr(z))
    lam = _inverse_mills(z)
    d_mu = np.zeros_like(mu)
    d_mu[obs] = r / sigma
    d_mu[cens] = lam / sigma
    d_log_sigma = np.sum(r * r - 1.0) + np.sum(-lam * z)
    # priors: ridge on beta, log-normal on sigma around sigma_prior (sd in log space)
    prior_s = (log_sigma - np.log(sigma_prior)) / sigma_prior_sd
    value = -loglik + 0.5 * np.sum(precision * beta * beta) + 0.5 * prior_s**2
    grad_beta = -(Z.T @ d_mu) + precision * beta
    grad_log_sigma = -d_log_sigma + prior_s / sigma_prior_sd
    return float(value), np.asarray(np.r_[grad_beta, grad_log_sigma], dtype=float)


def _hessian(
    Z: Array, y: Array, cens: Mask, offset: Array, beta: Array, sigma: float, precision: Array
) -> np.ndarray:
    """Hessian of the negative log posterior in beta at fixed sigma (the Laplace precision)."""
    mu = offset + Z @ beta
    weights = np.full(len(y), 1.0 / sigma**2)
    if cens.any():
        z = (mu[cens] - y[cens]) / sigma
        lam = _inverse_mills(z)
        weights[cens] = lam * (z + lam) / sigma**2
    return np.asarray((Z * weights[:, None]).T @ Z + np.diag(precision), dtype=float)
