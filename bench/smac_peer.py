"""SMAC3 (random-forest Bayesian optimisation over mixed spaces) as the benchmark's stronger peer,
given what a user of SMAC could give it — the same as the Optuna peers get.

Each free knob is a hyperparameter (numbers as an ordinal integer, choices and booleans
categorical), each patch a boolean; derived knobs follow. The start points (the baseline, the
priors' pick) are SMAC's initial design with a few random configs. SMAC has no constraints:
an out-of-memory trial is told the worst time seen so far (plus 0.1 in log seconds), and a
proposal the analytic memory estimate says does not fit is told that without running. A
proposal that is no candidate (a sampled table) runs its nearest untried candidate, which is
what SMAC is told (``snapped`` counts those). Installed by ``scripts/setup.sh`` (``smac``, a
benchmark extra); the product does not import it.
"""

from __future__ import annotations

import math
import tempfile

from infrarsi.identity import canonical_value
from infrarsi.run.problem import Outcome, Problem
from infrarsi.run.searcher_base import Searcher
from infrarsi.run.space import Config
from infrarsi.trial.record import TrialStatus

ASK_TRIES = 20
INITIAL_RANDOM = 3


class SMACSearcher(Searcher):
    """SMAC's hyperparameter-optimisation facade behind ask / tell."""

    name = "smac"

    def __init__(self, problem: Problem, seed: int = 0):
        super().__init__(problem, seed)
        from ConfigSpace import Categorical, Configuration, ConfigurationSpace, Integer
        from smac import HyperparameterOptimizationFacade as HPO
        from smac import Scenario

        self._configuration = Configuration
        self.dims = [d for d in problem.space.dims if d.name not in problem.derived]
        space = ConfigurationSpace(seed=seed)
        for dim in self.dims:
            space.add(
                Integer(dim.name, (0, len(dim.levels) - 1))
                if dim.kind == "num"
                else Categorical(dim.name, [str(v) for v in dim.levels])
            )
        for patch in problem.space.patches:
            space.add(Categorical("+" + patch, [False, True]))
        self.space = space
        scenario = Scenario(
            space,
            deterministic=True,
            n_trials=10**6,
            seed=seed,
            output_directory=tempfile.mkdtemp(prefix="infrarsi-smac-"),
        )
        starts = [Configuration(space, self._values(c)) for c in problem.start_points()]
        design = HPO.get_initial_design(
            scenario, n_configs=INITIAL_RANDOM, additional_configs=starts
        )
        self.smac = HPO(
            scenario,
            lambda config, seed=0: 0.0,
            initial_design=design,
            overwrite=True,
            logging_level=40,
        )
        self.fits = dict(zip(problem.candidates, problem.analytic_fits()))
        self.fits.update({c: True for c in problem.start_points()})
        self.pending: dict[Config, object] = {}
        self.worst_log_s: float | None = None
        self.exact = self.snapped = 0

    def _values(self, config: Config) -> dict:
        knobs, out = config.knob_dict, {}
        for dim in self.dims:
            value = canonical_value(knobs.get(dim.name, dim.levels[0]))
            level = next(i for i, v in enumerate(dim.levels) if canonical_value(v) == value)
            out[dim.name] = level if dim.kind == "num" else str(dim.levels[level])
        out.update({"+" + p: p in config.patches for p in self.problem.space.patches})
        return out

    def _config(self, values: dict) -> tuple[Config | None, Config]:
        knobs = {}
        for dim in self.dims:
            value = values[dim.name]
            knobs[dim.name] = (
                dim.levels[int(value)]
                if dim.kind == "num"
                else next(v for v in dim.levels if canonical_value(v) == canonical_value(value))
            )
        patches = [p for p in self.problem.space.patches if bool(values["+" + p])]
        target = Config.of(knobs, patches)
        return self.problem.by_free_key().get(self.problem.free_key(target)), target

    def ask(self) -> Config | None:
        from smac.main.exceptions import ConfigurationSpaceExhaustedException
        from smac.runhistory.dataclasses import TrialValue

        target = self.problem.baseline
        for _ in range(ASK_TRIES):
            try:
                info = self.smac.ask()
            except (ConfigurationSpaceExhaustedException, StopIteration):  # every config told
                break
            found, target = self._config(dict(info.config))
            if found is None:
                self.smac.tell(info, TrialValue(cost=self._placeholder()))
                break
            if not self.fits.get(found, True):  # the analytic prefilter: free
                self.smac.tell(info, TrialValue(cost=self._placeholder()))
                continue
            self.pending[found] = info
            self.exact += 1
            return found
        found = self.problem.nearest(target, self.tried, self.rng)
        if found is not None:
            self.pending[found] = None
            self.snapped += 1
        return found

    def tell(self, config: Config, outcome: Outcome) -> None:
        from smac.runhistory.dataclasses import TrialInfo, TrialValue

        super().tell(config, outcome)
        if outcome.status == TrialStatus.OK:
            cost = math.log(outcome.step_time_s)
            self.worst_log_s = cost if self.worst_log_s is None else max(self.worst_log_s, cost)
        else:
            cost = self._placeholder()
        info = self.pending.pop(config, None)
        if info is None:  # what ran was not what SMAC asked: tell it what did
            info = TrialInfo(config=self._configuration(self.space, self._values(config)), seed=0)
        self.smac.tell(info, TrialValue(cost=cost))

    def _placeholder(self) -> float:
        return (self.worst_log_s if self.worst_log_s is not None else 0.0) + 0.1
