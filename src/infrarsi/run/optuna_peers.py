"""Optuna's TPE and GP samplers as peers, at their strongest honest setting, given what a user
of Optuna could give them.

Each free knob is a parameter (numbers as an ordinal index, so the samplers see their order;
choices and booleans categorical), each patch a boolean; derived knobs (the accumulation steps)
follow the others, as they do for the user. The problem's start points (the baseline, the
Doctor's seeds, the priors' pick) are enqueued first. Memory enters as a constraint set with
``trial.set_constraint``: an ok trial tells its true slack ``log(peak / capacity)`` (<= 0), an
out-of-memory one only that the cap was exceeded (a positive placeholder) — TPE ignores failed
trials, so an OOM is told COMPLETE with a placeholder value (the worst time seen) plus that
positive constraint. The analytic memory estimate is a prefilter: a proposal it says does not
fit is told infeasible without running, and the sampler asks again; a proposal already run runs
again (a new measurement of it, as an Optuna study would make for its user). Only when
``ASK_TRIES`` proposals in a row did not fit, or a proposal is no candidate at all (a sampled
table), does the nearest untried candidate run — counted in ``snapped``; on a full-factorial
table every trial runs exactly what the sampler proposed.
"""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from infrarsi.identity import canonical_value
from infrarsi.run.problem import Outcome, Problem
from infrarsi.run.searcher_base import Searcher
from infrarsi.run.space import Config, Dim
from infrarsi.trial.record import TrialStatus

OOM_EXCESS = 0.05
CONSTRAINT = "memory"
ASK_TRIES = 20


class OptunaSearcher(Searcher):
    """An Optuna study behind the ask / tell interface."""

    def __init__(
        self, problem: Problem, seed: int = 0, sampler: str = "tpe", n_startup_trials: int = 5
    ):
        super().__init__(problem, seed)
        self.name = sampler
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        made: optuna.samplers.BaseSampler
        if sampler == "tpe":
            made = optuna.samplers.TPESampler(
                seed=seed, multivariate=True, n_startup_trials=n_startup_trials
            )
        else:
            made = optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials)
        self.study = optuna.create_study(direction="minimize", sampler=made)
        self.dists = self._distributions()
        for start in problem.start_points():
            self.study.enqueue_trial(self._params(start))
        self.pending: dict[Config, optuna.Trial | None] = {}
        self.worst_log_s: float | None = None
        self.fits = dict(zip(problem.candidates, problem.analytic_fits()))
        self.fits.update({c: True for c in problem.start_points()})  # always run as given
        self.exact = self.snapped = 0  # trials run as proposed / run at a nearest candidate

    def _free_dims(self) -> list[Dim]:
        return [d for d in self.problem.space.dims if d.name not in self.problem.derived]

    def _distributions(self) -> dict[str, Any]:
        dists: dict[str, BaseDistribution] = {}
        for dim in self._free_dims():
            if dim.kind == "num":
                dists[dim.name] = IntDistribution(0, len(dim.levels) - 1)
            else:
                dists[dim.name] = CategoricalDistribution([str(v) for v in dim.levels])
        for patch in self.problem.space.patches:
            dists["+" + patch] = CategoricalDistribution([False, True])
        return dists

    def _params(self, config: Config) -> dict[str, Any]:
        knobs = config.knob_dict
        params: dict[str, Any] = {}
        for dim in self._free_dims():
            value = canonical_value(knobs.get(dim.name, dim.levels[0]))
            level = next(i for i, v in enumerate(dim.levels) if canonical_value(v) == value)
            params[dim.name] = level if dim.kind == "num" else str(dim.levels[level])
        params.update({"+" + p: p in config.patches for p in self.problem.space.patches})
        return params

    def _config(self, params: dict[str, Any]) -> tuple[Config | None, Config]:
        """The candidate a proposal names (its derived knobs following), or None."""
        knobs = {}
        for dim in self._free_dims():
            value = params[dim.name]
            knobs[dim.name] = (
                dim.levels[value]
                if dim.kind == "num"
                else next(v for v in dim.levels if canonical_value(v) == canonical_value(value))
            )
        patches = [p for p in self.problem.space.patches if params["+" + p]]
        target = Config.of(knobs, patches)
        return self.problem.by_free_key().get(self.problem.free_key(target)), target

    def ask(self) -> Config | None:
        for _ in range(ASK_TRIES):
            trial = self.study.ask(self.dists)
            found, target = self._config(trial.params)
            if found is None:  # no such candidate: the study forgets it, learns the nearest
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                break
            if not self.fits.get(found, True):  # the analytic prefilter: infeasible, free
                trial.set_constraint(CONSTRAINT, OOM_EXCESS)
                self.study.tell(trial, self._placeholder())
                continue
            self.pending[found] = trial  # already run or not: run as proposed (a repeat is
            # a new measurement of it, as an Optuna user's study would make)
            self.exact += 1
            return found
        else:
            target = found if found is not None else target
        found = self.problem.nearest(target, self.tried, self.rng)
        if found is not None:
            self.pending[found] = None
            self.snapped += 1
        return found

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
                params=self._params(config),
                distributions=self.dists,
                value=value,
                system_attrs={f"constraints:{CONSTRAINT}": constraint},
            )
        )

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
