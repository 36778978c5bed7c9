"""Trial records and stored trials as the search's outcomes, and configs as the store keeps
them: one reading for the run loop and for what the search knows before it starts."""

from __future__ import annotations

from typing import Any

from infrarsi.objective import ranked_step_time_s
from infrarsi.records.trial import TrialStatus
from infrarsi.run.problem import Outcome
from infrarsi.run.space import Config
from infrarsi.store import StoredTrial
from infrarsi.trial import TrialRecord


def outcome_of(
    record: TrialRecord, capacity: float | None, objective: str = "tokens_per_s"
) -> Outcome:
    """What a trial record tells a searcher: the time the contract's objective ranks by, per
    step (``objective.ranked_step_time_s``: for ``e2e_time`` compile and warm-up count), the
    largest per-rank peak, the cost, and the trial's own noise."""
    m = record.metrics
    if record.status is TrialStatus.SLOW and record.censored_time_per_step_s:
        return Outcome(
            TrialStatus.SLOW,
            ranked_time_per_step_s=record.censored_time_per_step_s,
            cost_s=record.cost_s,
        )
    if record.status is TrialStatus.SLOW:  # cut without a bound on record: says nothing of time
        return Outcome(TrialStatus.TIMEOUT, cost_s=record.cost_s)
    if record.status is not TrialStatus.OK or m is None:
        status = record.status.value
        return Outcome(
            status,
            cost_s=record.cost_s,
            cap_bytes=record.mem_cap_bytes or capacity if status == TrialStatus.OOM else None,
        )
    steady = max(1, m.steps - m.warmup_steps)
    return Outcome(
        TrialStatus.OK,
        ranked_time_per_step_s=ranked_step_time_s(record, objective),
        peak_bytes=m.max_peak_mem_bytes,
        cost_s=record.cost_s,
        noise_var_log=(m.step_time_cv**2) / steady,
    )


def config_json(config: Config) -> dict[str, Any]:
    """A config as stored: knobs and sorted patches."""
    return {"knobs": config.knob_dict, "patches": sorted(config.patches)}


def config_from_json(data: dict[str, Any]) -> Config:
    """A stored config (``config_json``) as a config."""
    return Config.of(data["knobs"], data["patches"])


def outcome_of_stored(trial: StoredTrial, capacity: float | None, objective: str) -> Outcome:
    """A stored trial as an outcome: from its record, or its row where none was kept."""
    if trial.record is not None:
        return outcome_of(trial.record, capacity, objective)
    return Outcome(
        trial.status,
        ranked_time_per_step_s=trial.step_time_s,
        peak_bytes=trial.peak_mem_bytes,
        cost_s=trial.cost_s or 0.0,
        cap_bytes=capacity if trial.status == TrialStatus.OOM else None,
    )
