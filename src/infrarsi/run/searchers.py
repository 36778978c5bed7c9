"""Searchers behind one small interface (ask / tell / recommend, like Optuna's samplers): the
peers InfraRSI must beat — ``random``, ``greedy`` and ``grid`` here, ``tpe`` and ``gp`` (Optuna)
in ``optuna_peers`` — and the registry that builds any of them, ``infrarsi`` included."""

from __future__ import annotations

import math

import numpy as np

from infrarsi.run.problem import Outcome, Problem
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

    def recommend(self) -> Config | None:
        """The config this searcher would ship now: the fastest ok trial it has seen."""
        ok = [(o.step_time_s, i) for i, (c, o) in enumerate(self.history) if o.status == "ok"]
        return self.history[min(ok)[1]][0] if ok else None

    def ranking(self, k: int) -> list[Config]:
        """Up to ``k`` distinct configs that ran ``ok``, best first: by their median measured
        step time (what Apply re-measures against the baseline)."""
        times: dict[Config, list[float]] = {}
        for c, o in self.history:
            if o.status == "ok":
                times.setdefault(c, []).append(o.step_time_s)
        return sorted(times, key=lambda c: float(np.median(times[c])))[:k]

    def _untried(self) -> list[Config]:
        return [c for c in self.problem.candidates if c not in self.tried]

    def should_stop(self, trials_left: int | None = None) -> bool:
        """Whether the searcher expects nothing worth a trial from what is left (``trials_left``
        of the budget; None when the budget is in seconds)."""
        return not self._untried()


class RandomSearcher(Searcher):
    """Uniformly random untried candidates, the baseline first."""
    name = "random"

    def ask(self) -> Config | None:
        if self.problem.baseline not in self.tried:
            return self.problem.baseline
        left = self._untried()
        return left[int(self.rng.integers(len(left)))] if left else None


class GreedySearcher(Searcher):
    """Coordinate descent from the baseline: change one knob or one patch at a time, keep the
    change when the trial is faster, sweep the dimensions in a random order until none helps."""
    name = "greedy"

    def __init__(self, problem: Problem, seed: int = 0):
        super().__init__(problem, seed)
        self.incumbent = problem.baseline
        self.best_s = math.inf
        self.queue: list[Config] = []

    def _moves(self) -> list[Config]:
        knobs = self.incumbent.knob_dict
        moves = []
        for dim in self.problem.space.dims:
            for level in dim.levels:
                if _same(level, knobs.get(dim.name)):
                    continue
                moves.append(Config.of({**knobs, dim.name: level},
                                       self.incumbent.patches))
        for patch in self.problem.space.patches:
            moves.append(Config.of(knobs, self.incumbent.patches ^ {patch}))
        order = self.rng.permutation(len(moves))
        return [moves[i] for i in order]

    def ask(self) -> Config | None:
        if self.problem.baseline not in self.tried:
            return self.problem.baseline
        while True:
            if not self.queue:
                self.queue = self._moves()
            target = self.queue.pop(0)
            found = self.problem.nearest(target, self.tried, self.rng)
            if found is None:
                return None
            return found

    def tell(self, config: Config, outcome: Outcome) -> None:
        super().tell(config, outcome)
        if outcome.status == "ok" and outcome.step_time_s < self.best_s:
            self.best_s, self.incumbent = outcome.step_time_s, config
            self.queue = []  # a new incumbent: sweep around it


class GridSearcher(Searcher):
    """A DeepSpeed-autotuner-style grid: configs whose analytic memory estimate exceeds the
    capacity are pruned, the rest run in grid order — the largest micro-batch first."""
    name = "grid"

    def __init__(self, problem: Problem, seed: int = 0):
        super().__init__(problem, seed)
        order = list(range(len(problem.candidates)))
        offsets, capacity = problem.offset_total, problem.capacity_bytes
        if offsets is not None and capacity is not None:
            fits = [i for i in order if offsets[i] <= math.log(capacity)]
            order = fits or order
        mb = problem.savers.micro_batch
        key = (lambda i: -float(problem.candidates[i].knob_dict.get(mb, 0))) if mb else None
        grid = sorted(order, key=lambda i: (key(i) if key else 0, i))
        self.order = [problem.baseline] + [problem.candidates[i] for i in grid]

    def ask(self) -> Config | None:
        return next((c for c in self.order if c not in self.tried), None)


def _same(a, b) -> bool:
    return str(a) == str(b)


def make(name: str, problem: Problem, seed: int = 0) -> Searcher:
    """The searcher called ``name`` on ``problem``."""
    if name == "infrarsi":
        from infrarsi.run.infrarsi_searcher import InfraRSISearcher
        return InfraRSISearcher(problem, seed)
    if name in ("tpe", "gp"):
        from infrarsi.run.optuna_peers import OptunaSearcher
        return OptunaSearcher(problem, seed, sampler=name)
    classes = {"random": RandomSearcher, "greedy": GreedySearcher, "grid": GridSearcher}
    if name not in classes:
        raise ValueError(f"searcher {name!r}: choose one of {', '.join(SEARCHERS)}")
    return classes[name](problem, seed)


SEARCHERS = ("infrarsi", "random", "greedy", "tpe", "gp", "grid")
