"""Trial cost: wall seconds one trial takes (start-up, compile, steps, checks), for cost-aware
choices. A ridge regression in log seconds, with ``oom`` as a feature of its own: an
out-of-memory trial usually ends early, and the search pays ``P(OOM)`` of that cost."""

from __future__ import annotations

import numpy as np


class TrialCostModel:
    """log cost_s = [1, X, oom] @ w + noise; ``fit`` returns the model."""

    def __init__(self, ridge: float = 1.0):
        self.ridge = ridge

    def __repr__(self) -> str:
        fitted = f"n={self.n_obs_}, oom={self.n_oom_}" if hasattr(self, "n_obs_") else "unfitted"
        return f"TrialCostModel({fitted})"

    def fit(self, X: np.ndarray, cost_s: np.ndarray, oom: np.ndarray) -> TrialCostModel:
        """Fit on encoded configs, measured costs (seconds) and whether each trial was OOM."""
        X = np.asarray(X, dtype=float)
        y = np.log(np.maximum(np.asarray(cost_s, dtype=float), 1e-3))
        Z = self._design(X, np.asarray(oom, dtype=float))
        self.n_obs_, self.n_oom_ = len(y), int(np.sum(oom))
        penalty = np.diag(np.r_[1e-6, np.full(Z.shape[1] - 1, self.ridge)])
        self.w_ = np.linalg.solve(Z.T @ Z + penalty, Z.T @ y) if len(y) else np.zeros(Z.shape[1])
        resid = y - Z @ self.w_ if len(y) else np.zeros(0)
        self.sigma_ = float(np.sqrt(np.mean(resid**2))) if len(y) > 2 else 0.5
        return self

    @staticmethod
    def _design(X: np.ndarray, oom: np.ndarray) -> np.ndarray:
        return np.hstack([np.ones((len(X), 1)), X, oom.reshape(-1, 1)])

    def predict_cost_s(self, X: np.ndarray, p_oom: np.ndarray | float = 0.0) -> np.ndarray:
        """Expected wall seconds of a trial of each config, given its P(OOM)."""
        X = np.asarray(X, dtype=float)
        p = np.broadcast_to(np.asarray(p_oom, dtype=float), (len(X),))
        ok = np.exp(self._design(X, np.zeros(len(X))) @ self.w_ + self.sigma_**2 / 2)
        oom = np.exp(self._design(X, np.ones(len(X))) @ self.w_ + self.sigma_**2 / 2)
        expected: np.ndarray = (1 - p) * ok + p * oom
        return expected
