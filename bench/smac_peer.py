"""SMAC3 (random-forest Bayesian optimisation over mixed spaces) as the benchmark's stronger peer,
given what a user of SMAC could give it — the same as the Optuna peers get, run as its authors
run it on a noisy objective.

The space is ``peer_space.PeerSpace`` (each free knob a hyperparameter — numbers as an ordinal
integer, other values categorical — the patches one boolean each or one choice among the patch
sets; derived knobs follow) and the ask loop ``peer_space.PeerSearcher``'s, so every trial runs
exactly what SMAC proposed. The objective is noisy (a trial is one draw of a config's time), so
SMAC runs with ``deterministic=False``: its intensifier re-runs promising configs under new seeds
and races them against the incumbent, and its incumbent (what it recommends) is the config with
the best mean over its runs. The initial design is the start points (the baseline, the priors'
pick) first, then ``INITIAL_RANDOM`` Sobol configs. SMAC has no constraints: an out-of-memory
trial is told the worst time seen so far plus 0.1 in log seconds (its documented way with a
crashed run: a bad cost), and so is a proposal the analytic memory estimate says does not fit,
without running. Installed by ``scripts/setup.sh`` (``smac``, a benchmark extra); the product
does not import it.
"""

from __future__ import annotations

import math
import tempfile
from typing import Any

from infrarsi.records.trial import TrialStatus
from infrarsi.run.peer_space import PeerSearcher
from infrarsi.run.problem import Outcome, Problem
from infrarsi.run.space import Config

INITIAL_RANDOM = 3


class SMACSearcher(PeerSearcher):
    """SMAC's hyperparameter-optimisation facade behind ask / tell."""

    name = "smac"

    def __init__(self, problem: Problem, seed: int = 0):
        super().__init__(problem, seed)
        from ConfigSpace import Categorical, Configuration, ConfigurationSpace, Integer

        self._configuration = Configuration
        space = ConfigurationSpace(seed=seed)
        for p in self.peer_space.params():
            space.add(
                Integer(p.name, (0, len(p.choices) - 1))
                if p.kind == "int"
                else Categorical(p.name, list(p.choices))
            )
        self.space, self.seed = space, seed
        self.worst_log_s: float | None = None
        self._smac = None

    @property
    def smac(self):
        """SMAC's facade, made at the first proposal: its initial design is the start points
        not measured yet (the Doctor's baseline runs are told before the search starts), then
        its random configs; what was told before is told to it then."""
        if self._smac is None:
            from smac import HyperparameterOptimizationFacade as HPO
            from smac import Scenario
            from smac.runhistory.dataclasses import TrialInfo, TrialValue

            scenario = Scenario(
                self.space,
                deterministic=False,
                n_trials=10**6,
                seed=self.seed,
                output_directory=tempfile.mkdtemp(prefix="infrarsi-smac-"),
            )
            starts = [
                self._configuration(self.space, self.peer_space.values(c))
                for c in self.problem.start_points()
                if c not in self.tried
            ]
            design = _starts_first(
                HPO.get_initial_design(
                    scenario, n_configs=INITIAL_RANDOM, additional_configs=starts
                )
            )
            self._smac = HPO(
                scenario,
                lambda config, seed=0: 0.0,
                initial_design=design,
                overwrite=True,
                logging_level=40,
            )
            for k, (config, outcome) in enumerate(self.history):
                values = self.peer_space.values(config)
                info = TrialInfo(config=self._configuration(self.space, values), seed=k)
                self._smac.tell(info, TrialValue(cost=self._cost(outcome)))
        return self._smac

    def _propose(self) -> tuple[Any, dict[str, Any]] | None:
        from smac.main.exceptions import ConfigurationSpaceExhaustedException

        try:
            info = self.smac.ask()
        except (ConfigurationSpaceExhaustedException, StopIteration):  # every config told
            return None
        return info, dict(info.config)

    def _refuse(self, handle: Any, unfit: bool) -> None:
        from smac.runhistory.dataclasses import TrialValue

        self.smac.tell(handle, TrialValue(cost=self._placeholder()))

    def tell(self, config: Config, outcome: Outcome) -> None:
        from smac.runhistory.dataclasses import TrialInfo, TrialValue

        super().tell(config, outcome)
        cost = self._cost(outcome)
        if self._smac is None:  # told before the first proposal: told to SMAC when it is made
            return
        info = self.pending.pop(config, None)
        if info is None:  # what ran was not what SMAC asked: tell it what did
            values = self.peer_space.values(config)
            info = TrialInfo(config=self._configuration(self.space, values), seed=len(self.history))
        self.smac.tell(info, TrialValue(cost=cost))

    def recommend(self) -> Config | None:
        """SMAC's incumbent: the config with the best mean cost over its runs."""
        incumbent = self.smac.intensifier.get_incumbent()
        if incumbent is None:
            return super().recommend()
        found = self.peer_space.config(dict(incumbent))[0]
        return found if found in self.tried else super().recommend()

    def _cost(self, outcome: Outcome) -> float:
        """The cost SMAC is told: log seconds per step, or the placeholder for a failure."""
        if outcome.status == TrialStatus.OK:
            cost = math.log(outcome.time_s)
            self.worst_log_s = cost if self.worst_log_s is None else max(self.worst_log_s, cost)
            return cost
        return self._placeholder()

    def _placeholder(self) -> float:
        return (self.worst_log_s if self.worst_log_s is not None else 0.0) + 0.1


def _starts_first(design):
    """SMAC's initial design with its additional configs (the start points) before its own
    random ones (it appends them after)."""
    select = design.select_configurations

    def starts_first():
        configs = select()
        starts = [c for c in configs if c in design._additional_configs]
        return starts + [c for c in configs if c not in starts]

    design.select_configurations = starts_first
    return design
