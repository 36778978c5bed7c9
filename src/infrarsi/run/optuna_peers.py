"""Optuna's TPE and GP samplers as peers, at their strongest honest setting, given what a user
of Optuna could give them.

The sampler's space is ``peer_space.PeerSpace`` (each free knob a parameter, the patches one
boolean each or one choice among the patch sets); the ask loop — the analytic memory prefilter,
refused configs, ``proposed`` — is ``peer_space.PeerSearcher``'s, so every trial runs exactly
what the sampler proposed (a proposal already run runs again: a new measurement of it, as an
Optuna study would make for its user). The problem's start points (the baseline, the Doctor's
seeds, the priors' pick) are enqueued first, less those measured before the search (the
Doctor's baseline runs, told to the study as trials). Memory enters as a constraint set with
``trial.set_constraint``: an ok trial tells its true slack ``log(peak / capacity)`` (<= 0), an
out-of-memory one only that the cap was exceeded (a positive placeholder) — TPE ignores failed
trials, so an OOM is told COMPLETE with a placeholder value (the worst time seen) plus that
positive constraint. A config the workload refuses is told the same way (infeasible, free).
The recommendation is the study's own incumbent: its best feasible trial.

``tpe-prior`` is TPE guided by the catalog's claims as a user of Optuna could guide it: after
the start points, the candidates the priors rank fastest (among those the estimate says fit)
are enqueued, so the catalog's value and a model's value can be measured apart.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from infrarsi.records.trial import TrialStatus
from infrarsi.run.peer_space import PeerSearcher
from infrarsi.run.problem import Outcome, Problem
from infrarsi.run.space import Config

OOM_EXCESS = 0.05
CONSTRAINT = "memory"
PRIOR_PICKS = 4  # tpe-prior: the priors' top candidates enqueued after the start points


class OptunaSearcher(PeerSearcher):
    """An Optuna study behind the ask / tell interface."""

    def __init__(
        self, problem: Problem, seed: int = 0, sampler: str = "tpe", n_startup_trials: int = 5
    ):
        super().__init__(problem, seed)
        self.name = sampler
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        made: optuna.samplers.BaseSampler
        if sampler in ("tpe", "tpe-prior"):
            made = optuna.samplers.TPESampler(
                seed=seed, multivariate=True, n_startup_trials=n_startup_trials
            )
        else:
            made = optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials)
        self.study = optuna.create_study(direction="minimize", sampler=made)
        self.dists = self._distributions()
        self.worst_log_s: float | None = None
        self._enqueued = False

    def _enqueue_starts(self) -> None:
        """The start points (for ``tpe-prior`` the priors' top picks after them) enqueued
        before the first proposal, less those already measured (the Doctor's baseline runs,
        told before the search starts)."""
        starts = self.problem.start_points()
        if self.name == "tpe-prior":
            starts = list(dict.fromkeys(starts + prior_ranked(self.problem, PRIOR_PICKS)))
        for start in starts:
            if start not in self.tried:
                self.study.enqueue_trial(self.peer_space.values(start))
        self._enqueued = True

    def _distributions(self) -> dict[str, BaseDistribution]:
        return {
            p.name: IntDistribution(0, len(p.choices) - 1)
            if p.kind == "int"
            else CategoricalDistribution(list(p.choices))
            for p in self.peer_space.params()
        }

    def _propose(self) -> tuple[Any, dict[str, Any]]:
        if not self._enqueued:
            self._enqueue_starts()
        trial = self.study.ask(self.dists)
        return trial, trial.params

    def _refuse(self, handle: Any, unfit: bool) -> None:
        """A proposal that did not run — the analytic prefilter says it does not fit, or the
        workload refuses the combination — is told infeasible (the constraint violated, the
        placeholder value), free: TPE learns nothing from a FAILed trial and proposed a
        refused combination again and again (20 in a row on the first held-out table)."""
        handle.set_constraint(CONSTRAINT, OOM_EXCESS)
        self.study.tell(handle, self._placeholder())

    def _placeholder(self) -> float:
        return (self.worst_log_s if self.worst_log_s is not None else 0.0) + 0.1

    def tell(self, config: Config, outcome: Outcome) -> None:
        super().tell(config, outcome)
        value, constraint = self._value(outcome)
        trial = self.pending.pop(config, None)
        if trial is not None:
            trial.set_constraint(CONSTRAINT, constraint)
            self.study.tell(trial, value)
            return
        self.study.add_trial(
            optuna.trial.create_trial(
                params=self.peer_space.values(config),
                distributions=self.dists,
                value=value,
                system_attrs={f"constraints:{CONSTRAINT}": constraint},
            )
        )

    def recommend(self) -> Config | None:
        """The study's incumbent: its best trial that met the memory constraint."""
        feasible = [
            t
            for t in self.study.trials
            if t.state == optuna.trial.TrialState.COMPLETE
            and t.value is not None
            and t.system_attrs.get(f"constraints:{CONSTRAINT}", 0.0) <= 0.0
            and t.params
        ]
        if not feasible:
            return None
        best = min(feasible, key=lambda t: float(t.value or 0.0))
        return self.peer_space.config(best.params)[0]

    def _value(self, outcome: Outcome) -> tuple[float, float]:
        """(objective, constraint) as told to the study."""
        capacity = self.problem.capacity_bytes
        if outcome.status == TrialStatus.OK:
            log_s = math.log(outcome.time_s)
            self.worst_log_s = log_s if self.worst_log_s is None else max(self.worst_log_s, log_s)
            slack = (
                math.log(outcome.peak_bytes / capacity)
                if capacity and outcome.peak_bytes
                else -OOM_EXCESS
            )
            return log_s, min(slack, 0.0)
        return self._placeholder(), OOM_EXCESS


def prior_ranked(problem: Problem, k: int) -> list[Config]:
    """The ``k`` candidates the priors (the catalog's claimed ratios and the Doctor's measured
    ones) expect fastest, among those the analytic estimate says fit: what a user of Optuna
    could enqueue from the catalog. Empty without a prior."""
    prior = problem.prior_log_ratio()
    if prior is None:
        return []
    prior = np.where(problem.analytic_fits(), prior, np.inf)
    order = np.argsort(prior, kind="stable")
    return [problem.candidates[i] for i in order[:k] if np.isfinite(prior[i])]
