"""The interface every searcher implements (ask / tell / recommend, like Optuna's samplers):
its own module, so the searchers and the registry that builds them import it without a cycle."""

from __future__ import annotations

import numpy as np

from infrarsi.records.trial import TrialStatus
from infrarsi.run.problem import Outcome, Problem, SlowBound
from infrarsi.run.space import Config


class Searcher:
    """Proposes configs of a problem one at a time and learns from their outcomes."""

    name = "base"

    def __init__(self, problem: Problem, seed: int = 0):
        self.problem = problem
        self.rng = np.random.default_rng(seed)
        self.history: list[tuple[Config, Outcome]] = []
        self.tried: set[Config] = set()

    def ask(self) -> Config | None:
        """The next config to run (None when nothing is left)."""
        raise NotImplementedError

    def tell(self, config: Config, outcome: Outcome) -> None:
        """Record what a trial of ``config`` showed."""
        self.history.append((config, outcome))
        self.tried.add(config)

    def in_flight(self) -> list[Config]:
        """Configs in flight: proposed (``tried``) and not told yet — with trials in parallel,
        what the next proposal should keep away from (it is not yet measured, so a model
        would propose its neighbours again)."""
        told = {c for c, _ in self.history}
        return [c for c in self.tried if c not in told]

    def recommend(self) -> Config | None:
        """The config this searcher would ship now: the fastest ok trial it has seen."""
        ok = [
            (o.ranked_time_per_step_s, i)
            for i, (c, o) in enumerate(self.history)
            if o.status == TrialStatus.OK
        ]
        return self.history[min(ok)[1]][0] if ok else None

    def ranking(self, k: int) -> list[Config]:
        """Up to ``k`` distinct configs that ran ``ok``, best first: by their median measured
        step time (what Apply re-measures against the baseline)."""
        times: dict[Config, list[float]] = {}
        for c, o in self.history:
            if o.status == TrialStatus.OK:
                times.setdefault(c, []).append(o.time_s)
        return sorted(times, key=lambda c: float(np.median(times[c])))[:k]

    def slow_bound(self) -> SlowBound | None:
        """When the next trial should be cut short and recorded ``slow``: None (run it to its
        timeout) unless the searcher sets a bound."""
        return None

    def _next_start(self) -> Config | None:
        """The first untried of the problem's start points (the baseline, the seeds, the
        priors' pick), which every searcher is given; the bank's seeds are passed over once
        one of them did not hold here (``Problem.bank_contradicted``)."""
        refuted = (
            set(self.problem.bank_seeds) if self.problem.bank_contradicted(self.history) else set()
        )
        return next(
            (c for c in self.problem.start_points() if c not in self.tried and c not in refuted),
            None,
        )

    def _untried_that_fit(self) -> list[Config]:
        """Untried candidates the analytic memory estimate says fit (every untried one when
        none does)."""
        fits = self.problem.analytic_fits()
        left = [c for c, f in zip(self.problem.candidates, fits) if f and c not in self.tried]
        return left or self._untried()

    def _untried(self) -> list[Config]:
        return [c for c in self.problem.candidates if c not in self.tried]

    def should_stop(self, trials_left: int | None = None) -> bool:
        """Whether the searcher expects nothing worth a trial from what is left (``trials_left``
        of the budget; None when the budget is in seconds)."""
        return not self._untried()
