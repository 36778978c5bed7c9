"""Step time (log seconds) over the mixed knob/patch space, with uncertainty.

Two families, chosen between on the measured tables (``bench/models.py`` reports both):

- ``gp``: a Gaussian process, Matern 5/2 plus a white-noise kernel, with one length scale per
  encoded column (ARD) once there are twice as many points as columns (one shared before); each
  trial's own noise (the spread of its steady steps, ``cv^2 / steps``)
  enters as its per-point noise, so a noisy trial pulls the surface less. Its signal variance
  has a floor (``AMPLITUDE_MIN_LOG``): trials no more spread than their noise must not make
  the model sure that an untried config gains nothing.
- ``forest``: extremely randomised trees; the spread of the trees is the uncertainty. Real step
  times have jumps (a kernel switch, a layout that oversubscribes the cores) that trees follow.

Only ``ok`` trials enter: a trial that ran out of memory has no step time.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from scipy import special

from infrarsi.errors import InfraRSIError
from infrarsi.run.space import single_threaded

FAMILIES = ("gp", "forest")
HYPER_FIT_MAX = 80  # past this many trials the GP's hyperparameters are fitted on a subset
# the least signal (sd, log seconds) the GP may call the step-time surface: the same a-priori
# 10% the memory model's residual starts from. Without it, trials whose spread is no more than
# their noise drove the signal variance to its bound, and every untried config was predicted to
# ~1% (cold replays, 30 seeds, 20 trials: dense-1node-full Intel 2c reached the target in 14 of
# 30 seeds, 25 with the floor; moe-1node-full AMD 1c 19 -> 22; the other 13 tables' medians
# within one trial: dense-2node sampled 11 -> 12)
AMPLITUDE_MIN_LOG = 0.1
GP_RESTARTS = 0  # restarts of the GP's hyperparameter fit from random starts (sklearn's)


class StepTimeModel:
    """log step time = f(config) + noise; ``fit`` returns the model."""

    def __init__(self, family: str = "gp", seed: int = 0):
        if family not in FAMILIES:
            raise InfraRSIError(f"step-time family {family!r}: choose one of {FAMILIES}")
        self.family = family
        self.seed = seed

    def __repr__(self) -> str:
        fitted = f"n={self.n_obs_}" if hasattr(self, "n_obs_") else "unfitted"
        return f"StepTimeModel({self.family}, {fitted})"

    @single_threaded
    def fit(
        self, X: np.ndarray, step_time_s: np.ndarray, noise_var_log: np.ndarray | None = None
    ) -> StepTimeModel:
        """Fit on encoded configs and measured step times; ``noise_var_log`` per trial."""
        X = np.asarray(X, dtype=float)
        y = np.log(np.asarray(step_time_s, dtype=float))
        self.n_obs_ = len(y)
        self.y_mean_ = float(np.mean(y)) if len(y) else 0.0
        self.y_sd_ = float(np.std(y)) if len(y) > 1 else 0.1
        if len(y) < 2:
            self.model_ = None
            return self
        noise = (
            np.full(len(y), 1e-4)
            if noise_var_log is None
            else np.maximum(np.asarray(noise_var_log, dtype=float), 1e-6)
        )
        self.model_ = self._gp(X, y, noise) if self.family == "gp" else self._forest(X, y)
        return self

    def _gp(self, X: np.ndarray, y: np.ndarray, noise: np.ndarray) -> Any:
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

        # one length scale per column (ARD) only once there are enough points to tell them
        # apart; before that, ARD fits noise and one shared length scale generalises better
        ard = len(y) >= 2 * X.shape[1]
        scale = np.ones(X.shape[1]) * 2.0 if ard else 2.0
        kernel = ConstantKernel(*self._amplitude()) * Matern(
            length_scale=scale, length_scale_bounds=(1e-1, 1e3), nu=2.5
        ) + WhiteKernel(1e-2, (1e-5, 1.0))
        gp = GaussianProcessRegressor(
            kernel,
            alpha=noise / max(self.y_sd_, 1e-3) ** 2,
            normalize_y=True,
            n_restarts_optimizer=GP_RESTARTS,
            random_state=self.seed,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if len(y) > HYPER_FIT_MAX:  # hyperparameters from a subset, the posterior from all
                pick = np.random.default_rng(self.seed).choice(len(y), HYPER_FIT_MAX, False)
                gp.alpha = noise[pick] / max(self.y_sd_, 1e-3) ** 2
                gp.fit(X[pick], y[pick])
                gp = GaussianProcessRegressor(
                    gp.kernel_,
                    alpha=noise / max(self.y_sd_, 1e-3) ** 2,
                    normalize_y=True,
                    optimizer=None,
                )
            gp.fit(X, y)
        return gp

    def _amplitude(self) -> tuple[float, tuple[float, float]]:
        """The signal variance's start and bounds on the normalised scale (``normalize_y``
        divides by the spread of the measured logs): at least ``AMPLITUDE_MIN_LOG`` in log
        seconds, so noisy trials cannot make the model call every untried config known."""
        y_sd = self.y_sd_ if self.y_sd_ > 1e-12 else 1.0  # sklearn's scale for a flat y
        low = max(1e-2, (AMPLITUDE_MIN_LOG / y_sd) ** 2)
        high = max(1e2, 10 * low)
        return max(1.0, low), (low, high)

    def log_evidence(self) -> float | None:
        """log p(y) of the GP's fit on the scale of log seconds (its normalisation undone), so
        that fits of different targets compare; None for the forest or fewer than 2 points."""
        if self.family != "gp" or self.model_ is None:
            return None
        n = self.n_obs_
        return float(
            self.model_.log_marginal_likelihood_value_
            - n * np.log(max(self.model_._y_train_std, 1e-12))
        )

    def basis_weight(
        self,
        X: np.ndarray,
        residual_log: np.ndarray,
        basis_log: np.ndarray,
        noise_var_log: np.ndarray,
        prior_sd: float,
    ) -> tuple[float, float] | None:
        """Posterior mean and sd of ``w`` in ``residual_log = c + w * basis_log + f(X) + noise``,
        with ``w ~ N(1, prior_sd^2)``, a flat intercept ``c`` and ``f`` this fitted GP's
        kernel (Rasmussen & Williams 2006, sec. 2.7: explicit basis functions, ``f``
        marginalised). What a prior column (``basis_log``) is worth on these trials: the
        GP's own flexibility is counted, so a few noisy trials move ``w`` only as far as they
        tell the column's pattern from what the kernel could fit anyway. None for the forest
        or before a GP was fitted."""
        if self.family != "gp" or self.model_ is None:
            return None
        X = np.asarray(X, dtype=float)
        scale = max(self.model_._y_train_std, 1e-12) ** 2  # normalize_y's variance, undone
        noise = np.maximum(np.asarray(noise_var_log, dtype=float), 1e-6)
        C = scale * self.model_.kernel_(X) + np.diag(noise)  # the white kernel is in kernel_
        H = np.column_stack([np.ones(len(X)), np.asarray(basis_log, dtype=float)])
        Ci_H = np.linalg.solve(C, H)
        A = H.T @ Ci_H + np.diag([1e-8, 1.0 / prior_sd**2])
        b = Ci_H.T @ np.asarray(residual_log, dtype=float) + np.array([0.0, 1.0 / prior_sd**2])
        mean = np.linalg.solve(A, b)
        return float(mean[1]), float(math.sqrt(max(np.linalg.inv(A)[1, 1], 0.0)))

    def _forest(self, X: np.ndarray, y: np.ndarray) -> Any:
        from sklearn.ensemble import ExtraTreesRegressor

        forest = ExtraTreesRegressor(
            n_estimators=100, min_samples_leaf=2, random_state=self.seed, n_jobs=1
        )
        forest.fit(X, y)
        return forest

    @single_threaded
    def predict_log(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of log step time for encoded configs."""
        X = np.asarray(X, dtype=float)
        if self.model_ is None:
            return np.full(len(X), self.y_mean_), np.full(len(X), 0.5)
        if self.family == "gp":
            mean, sd = self.model_.predict(X, return_std=True)
            return mean, np.maximum(sd, 1e-3)
        per_tree = np.stack([t.predict(X) for t in self.model_.estimators_])
        return per_tree.mean(axis=0), np.maximum(per_tree.std(axis=0), 0.02)

    def predict_step_time_s(self, X: np.ndarray) -> np.ndarray:
        """Median predicted step time in seconds."""
        median: np.ndarray = np.exp(self.predict_log(X)[0])
        return median


def log_expected_improvement(best: float, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """log expected improvement below ``best`` (minimisation), stable far in the tail."""
    z = (best - mu) / sd
    # EI = sd * (z * Phi(z) + phi(z)); for z << 0 use the asymptotic log phi(z) - log(z^2)
    with np.errstate(divide="ignore", invalid="ignore"):
        direct = np.log(
            np.maximum(z * special.ndtr(z) + np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi), 1e-300)
        )
        tail = -0.5 * z * z - 0.5 * math.log(2 * math.pi) - np.log(np.maximum(z * z, 1e-300))
    out: np.ndarray = np.log(sd) + np.where(z > -5, direct, tail)
    return out
