"""Optuna's TPE and GP samplers as peers, at their strongest honest setting.

Each knob is a parameter (numbers as an ordinal index, so the samplers see their order; choices
and booleans categorical), each patch a boolean. The baseline is enqueued first. Memory enters
as a constraint set with ``trial.set_constraint``: an ok trial tells its true slack
``log(peak / capacity)`` (<= 0), an out-of-memory one only that the cap was exceeded (a
positive placeholder) — TPE ignores failed trials, so an OOM is told COMPLETE with a placeholder
value (the worst time seen) plus that positive constraint. A proposal that is not a runnable
candidate runs its nearest untried candidate, and that candidate is what the study learns.
"""

from __future__ import annotations

import math

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution

from infrarsi.run.problem import Outcome, Problem
from infrarsi.run.searcher_base import Searcher
from infrarsi.run.space import Config
from infrarsi.trial.record import TrialStatus

OOM_EXCESS = 0.05
CONSTRAINT = "memory"


class OptunaSearcher(Searcher):
    """An Optuna study behind the ask / tell interface."""

    def __init__(self, problem: Problem, seed: int = 0, sampler: str = "tpe",
                 n_startup_trials: int = 5):
        super().__init__(problem, seed)
        self.name = sampler
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if sampler == "tpe":
            made = optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                              n_startup_trials=n_startup_trials)
        else:
            made = optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials)
        self.study = optuna.create_study(direction="minimize", sampler=made)
        self.dists = self._distributions()
        self.study.enqueue_trial(self._params(problem.baseline))
        self.pending: dict[Config, optuna.Trial | None] = {}
        self.worst_log_s = None

    def _distributions(self) -> dict:
        dists = {}
        for dim in self.problem.space.dims:
            if dim.kind == "num":
                dists[dim.name] = IntDistribution(0, len(dim.levels) - 1)
            else:
                dists[dim.name] = CategoricalDistribution([str(v) for v in dim.levels])
        for patch in self.problem.space.patches:
            dists["+" + patch] = CategoricalDistribution([False, True])
        return dists

    def _params(self, config: Config) -> dict:
        knobs = config.knob_dict
        params = {}
        for dim in self.problem.space.dims:
            value = knobs.get(dim.name, dim.levels[0])
            if dim.kind == "num":
                params[dim.name] = next(i for i, v in enumerate(dim.levels) if str(v) == str(value))
            else:
                params[dim.name] = str(value)
        params.update({"+" + p: p in config.patches for p in self.problem.space.patches})
        return params

    def _config(self, params: dict) -> Config:
        knobs = {}
        for dim in self.problem.space.dims:
            value = params[dim.name]
            knobs[dim.name] = dim.levels[value] if dim.kind == "num" else \
                next(v for v in dim.levels if str(v) == value)
        patches = [p for p in self.problem.space.patches if params["+" + p]]
        return Config.of(knobs, patches)

    def ask(self) -> Config | None:
        if not self._untried():
            return None
        trial = self.study.ask(self.dists)
        target = self._config(trial.params)
        if target in self.problem.index and target not in self.tried:
            self.pending[target] = trial
            return target
        # not runnable (or already run): the study forgets this proposal, learns the nearest
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        found = self.problem.nearest(target, self.tried, self.rng)
        if found is not None:
            self.pending[found] = None
        return found

    def tell(self, config: Config, outcome: Outcome) -> None:
        super().tell(config, outcome)
        value, constraint = self._value(outcome)
        trial = self.pending.pop(config, None)
        if trial is not None:
            trial.set_constraint(CONSTRAINT, constraint)
            self.study.tell(trial, value)
            return
        self.study.add_trial(optuna.trial.create_trial(
            params=self._params(config), distributions=self.dists, value=value,
            system_attrs={f"constraints:{CONSTRAINT}": constraint}))

    def _value(self, outcome: Outcome) -> tuple[float, float]:
        """(objective, constraint) as told to the study."""
        capacity = self.problem.capacity_bytes
        if outcome.status == TrialStatus.OK:
            log_s = math.log(outcome.step_time_s)
            self.worst_log_s = log_s if self.worst_log_s is None else max(self.worst_log_s, log_s)
            slack = math.log(outcome.peak_bytes / capacity) \
                if capacity and outcome.peak_bytes else -OOM_EXCESS
            return log_s, min(slack, 0.0)
        placeholder = (self.worst_log_s if self.worst_log_s is not None else 0.0) + 0.1
        return placeholder, OOM_EXCESS
