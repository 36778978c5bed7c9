"""A multi-fidelity peer, the benchmark's counterpart of InfraRSI's slow-trial cut: Optuna's TPE
with asynchronous successive halving (ASHA, ``optuna.pruners.SuccessiveHalvingPruner``) over the
trial's optimizer steps as the fidelity — what a user of Optuna would write to stop a poor trial
early.

Each trial reports, after each step past the first (a warm-up), the log of the median step time
so far; the pruner compares it with the other trials at the same step and may stop it there.
A replayed trial is cut after that step (``replay.Oracle.run``'s ``stop_after``: charged what it
ran, told ``slow``) and the study is told it was pruned. On a table without per-step times no
trial can be cut: the peer is plain TPE there.
"""

from __future__ import annotations

import math
import statistics

import optuna

from infrarsi.records.trial import TrialStatus
from infrarsi.run.optuna_peers import OptunaSearcher
from infrarsi.run.problem import Outcome, Problem
from infrarsi.run.searcher_base import Searcher
from infrarsi.run.space import Config

MIN_STEPS = 2  # ASHA's minimum resource: steps before a trial may be stopped
REDUCTION = 3  # ASHA's reduction factor (Optuna's default)


class FidelitySearcher(OptunaSearcher):
    """TPE whose trials successive halving may stop after a few steps."""

    def __init__(self, problem: Problem, seed: int = 0):
        super().__init__(problem, seed, sampler="tpe")
        self.name = "tpe-asha"
        self.study = optuna.create_study(
            direction="minimize",
            sampler=self.study.sampler,
            pruner=optuna.pruners.SuccessiveHalvingPruner(
                min_resource=MIN_STEPS, reduction_factor=REDUCTION
            ),
        )
        self.pruned: set[int] = set()

    def stop_after(self, config: Config, step_times_s: list[float]) -> int | None:
        """After how many steps the pruner stops this trial (None: it runs them all)."""
        trial = self.pending.get(config)
        if trial is None or len(step_times_s) < 2:
            return None
        for k in range(2, len(step_times_s) + 1):
            trial.report(math.log(statistics.median(step_times_s[1:k])), k)
            if k < len(step_times_s) and trial.should_prune():
                self.pruned.add(trial.number)
                return k
        return None

    def tell(self, config: Config, outcome: Outcome) -> None:
        trial = self.pending.get(config)
        if outcome.status is TrialStatus.SLOW and trial is not None and trial.number in self.pruned:
            Searcher.tell(self, config, outcome)
            self.pending.pop(config)
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return
        super().tell(config, outcome)
