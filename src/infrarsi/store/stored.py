"""The records the store hands out: a run (``StoredRun``) and a trial (``StoredTrial``) as it holds
them, each read from its row in one place, and a run's state (``RunStatus``)."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from infrarsi.contract import Contract
from infrarsi.enums import ValueEnum
from infrarsi.identity import Configuration
from infrarsi.objective import ranked_step_time_s
from infrarsi.options import SearchOptions
from infrarsi.records import Prediction, RankedConfig
from infrarsi.records.trial import TrialRecord, TrialStatus
from infrarsi.stages import Stage


class RunStatus(ValueEnum):
    """A stored run's state: ``doctoring`` (opened before its Doctor, whose trials go in as
    they end), searching (or killed while it searched: ``running`` until it is resumed),
    ``finished`` at its budget or when nothing was left to try."""

    DOCTORING = "doctoring"
    RUNNING = "running"
    FINISHED = "finished"


class StoredRun(BaseModel):
    """A run as the store holds it."""

    run_id: str
    created_unix_s: float
    workload: str
    scale: str
    contract_hash: str
    contract_json: dict[str, Any]
    searcher: str
    seed: int
    budget_trials: int | None
    budget_s: float | None
    capacity_bytes: int | None
    status: RunStatus
    stop_reason: str | None = None
    ranking_json: list[Any] | None = Field(
        None,
        description="the configs the run recommends, best "
        "first: {knobs, patches, step_time_s, trials}",
    )

    @classmethod
    def opened(
        cls,
        run_id: str,
        contract: Contract,
        workload: str,
        search: SearchOptions,
        status: RunStatus,
    ) -> StoredRun:
        """A run of ``contract`` searched as ``search`` says (its budget as given there), at
        ``status``, created now."""
        return cls(
            run_id=run_id,
            created_unix_s=time.time(),
            workload=workload,
            scale=contract.scale,
            contract_hash=contract.contract_hash,
            contract_json=contract.model_dump(mode="json"),
            searcher=search.searcher,
            seed=search.seed,
            budget_trials=search.budget.trials,
            budget_s=search.budget.seconds,
            capacity_bytes=contract.mem_cap_bytes,
            status=status,
        )

    @classmethod
    def of(cls, row: object) -> StoredRun:
        """The run a ``RunRow`` holds: the one place a stored run is read."""
        return cls.model_validate(row, from_attributes=True)

    @property
    def contract(self) -> Contract:
        """The run's frozen contract, as stored with it."""
        return Contract.read(self.contract_json)

    @property
    def ranking(self) -> list[RankedConfig]:
        """The configs the run recommends, best first (empty before it finished)."""
        return [RankedConfig.model_validate(entry) for entry in self.ranking_json or []]


class StoredTrial(BaseModel):
    """A trial as the store holds it: its stage, label and proposer, the config, the
    predictions made when it was proposed, and (once it ended) its ``TrialRecord``, read once
    here: every stage, the audit and the report read this record."""

    model_config = ConfigDict(populate_by_name=True)
    id: int
    run_id: str
    seq: int
    stage: Stage = Stage.RUN
    label: str | None = None
    proposed_by: str | None = None
    config_json: dict[str, Any]
    status: TrialStatus
    trial_id: str | None = None
    predicted_ranked_time_per_step_s: float | None = None
    predicted_p_oom: float | None = None
    predicted_peak_bytes: float | None = None
    step_time_s: float | None = None
    peak_mem_bytes: float | None = None
    cost_s: float | None = None
    started_unix_s: float
    ended_unix_s: float | None = None
    error: str | None = None
    record: TrialRecord | None = Field(None, validation_alias="record_json")
    verdict: dict[str, Any] | None = Field(
        None,
        validation_alias="verdict_json",
        description="what the stage concluded of the trial: Apply's measurement of a round "
        "(its config and verdict) or the reference run it measured",
    )

    @property
    def configuration(self) -> Configuration:
        """The configuration this trial ran (its identity is ``config_key``'s)."""
        return Configuration.of(self.config_json["knobs"], self.config_json["patches"])

    @classmethod
    def of(cls, row: object) -> StoredTrial:
        """The trial a ``TrialRow`` holds, its record validated: the one place a stored trial
        is read."""
        return cls.model_validate(row, from_attributes=True)

    def ranked_time_per_step_s(self, objective: str) -> float | None:
        """What the search ranks this trial by under ``objective`` (``objective``'s reading of
        its record), else its stored steady step."""
        ranked = ranked_step_time_s(self.record, objective) if self.record else None
        return ranked if ranked is not None else self.step_time_s

    @property
    def censored_time_per_step_s(self) -> float | None:
        """A trial cut at the search's bound: the time per step it is at least."""
        return self.record.censored_time_per_step_s if self.record else None

    @property
    def predicted(self) -> Prediction:
        """The models' predictions at proposal (all None for a trial nobody predicted)."""
        return Prediction(
            ranked_time_per_step_s=self.predicted_ranked_time_per_step_s,
            p_oom=self.predicted_p_oom,
            peak_bytes=self.predicted_peak_bytes,
        )
