"""What a run hands on, read from its store: the ranking Apply verifies (the searcher's best
configs with what was measured of each), the run's result, and what a proposer is told of the
patches tried so far."""

from __future__ import annotations

from pathlib import Path

from infrarsi.proposal import ProposalState, patch_outcomes
from infrarsi.records import Best, RankedConfig, RunResult
from infrarsi.records.trial import TrialStatus
from infrarsi.run.outcomes import config_from_json, config_json
from infrarsi.run.searcher_base import Searcher
from infrarsi.run.space import Config
from infrarsi.store import StoredTrial

RANKED = 5  # configs a run hands to Apply, best first


def ranking(searcher: Searcher, trials: list[StoredTrial]) -> list[RankedConfig]:
    """The searcher's best configs, best first, with what the store measured of each."""
    out = []
    for config in searcher.ranking(RANKED):
        times = sorted(times_of(trials, config))
        out.append(
            RankedConfig(
                **config_json(config),
                trials=len(times),
                step_time_s=times[len(times) // 2] if times else None,
            )
        )
    return out


def run_result(
    run_dir: Path,
    run_id: str,
    searcher_name: str,
    searcher: Searcher,
    stored: list[StoredTrial],
    stop: tuple[str, int],
    ranked: list[RankedConfig],
) -> RunResult:
    """The run's result: its trials by status, the searcher's recommendation and the
    baseline with their best measured steps, its ranking; ``stop``: why it stopped and how
    many interrupted trials it proposed again."""
    trials = [t for t in stored if t.status.is_finished()]
    best = searcher.recommend()
    best_row = None
    if best is not None:
        times = times_of(trials, best)
        best_row = Best(
            knobs=best.knob_dict,
            patches=sorted(best.patches),
            step_time_s=min(times) if times else None,
        )
    base = times_of(trials, searcher.problem.baseline)
    reason, requeued = stop
    return RunResult(
        run_dir=str(run_dir),
        run_id=run_id,
        searcher=searcher_name,
        trials=len(trials),
        oom_trials=sum(t.status == TrialStatus.OOM for t in trials),
        slow_trials=sum(t.status == TrialStatus.SLOW for t in trials),
        interrupted_requeued=requeued,
        stop_reason=reason,
        best=best_row,
        ranking=list(ranked),
        baseline_step_time_s=min(base) if base else None,
    )


def times_of(trials: list[StoredTrial], config: Config) -> list[float]:
    """The steady step times the store holds of ``config``'s ok trials."""
    return [
        t.step_time_s
        for t in trials
        if t.status.is_ok()
        and t.step_time_s is not None
        and config_from_json(t.config_json) == config
    ]


def proposal_state(trials: list[StoredTrial], baseline: Config) -> ProposalState:
    """What a proposer is told: per patch, what the finished trials carrying it measured."""
    done = [t for t in trials if t.status.is_finished()]
    return ProposalState(trials_done=len(done), outcomes=patch_outcomes(done, baseline.knob_dict))
