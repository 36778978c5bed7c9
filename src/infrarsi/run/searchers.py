"""Searchers behind one small interface (ask / tell / recommend, like Optuna's samplers): the
peers InfraRSI must beat — ``random``, ``greedy`` and ``grid`` here, ``tpe`` and ``gp`` (Optuna)
in ``optuna_peers`` — and the registry that builds any of them, ``infrarsi`` included."""

from __future__ import annotations

import math

from infrarsi.errors import InfraRSIError
from infrarsi.identity import canonical_value
from infrarsi.run.problem import Outcome, Problem
from infrarsi.run.searcher_base import Searcher
from infrarsi.run.space import Config

__all__ = ["SEARCHERS", "GreedySearcher", "GridSearcher", "RandomSearcher", "Searcher", "make"]


class RandomSearcher(Searcher):
    """Uniformly random untried candidates, the baseline first."""

    name = "random"

    def ask(self) -> Config | None:
        first = self._next_start()
        if first is not None:
            return first
        left = self._untried_that_fit()
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
                moves.append(Config.of({**knobs, dim.name: level}, self.incumbent.patches))
        for patch in self.problem.space.patches:
            moves.append(Config.of(knobs, self.incumbent.patches ^ {patch}))
        order = self.rng.permutation(len(moves))
        return [moves[i] for i in order]

    def ask(self) -> Config | None:
        first = self._next_start()
        if first is not None:
            return first
        if not self.queue:
            self.queue = self._moves()
        target = self.queue.pop(0)
        unfit = {c for c, f in zip(self.problem.candidates, self.problem.analytic_fits()) if not f}
        return self.problem.nearest(target, self.tried | unfit, self.rng) or self.problem.nearest(
            target, self.tried, self.rng
        )

    def tell(self, config: Config, outcome: Outcome) -> None:
        super().tell(config, outcome)
        if outcome.status.is_ok() and outcome.time_s < self.best_s:
            self.best_s, self.incumbent = outcome.time_s, config
            self.queue = []  # a new incumbent: sweep around it


class GridSearcher(Searcher):
    """A DeepSpeed-autotuner-style grid: configs whose analytic memory estimate exceeds the
    capacity are pruned, the rest run largest micro-batch first; configs of one micro-batch
    in an order drawn by the seed (one fixed order would make every seed one replicate)."""

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
        tie = self.rng.permutation(len(problem.candidates))
        grid = sorted(order, key=lambda i: (key(i) if key else 0, int(tie[i])))
        self.order = problem.start_points() + [problem.candidates[i] for i in grid]

    def ask(self) -> Config | None:
        return next((c for c in self.order if c not in self.tried), None)


def _same(a: object, b: object) -> bool:
    return canonical_value(a) == canonical_value(b)


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
        raise InfraRSIError(f"searcher {name!r}: choose one of {', '.join(SEARCHERS)}")
    return classes[name](problem, seed)


SEARCHERS = ("infrarsi", "random", "greedy", "tpe", "gp", "grid")
