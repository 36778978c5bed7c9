"""The store every stage reads and writes: runs and their trials, over SQLAlchemy.

SQLite in the run directory by default (``run.sqlite``), any SQLAlchemy URL otherwise
(PostgreSQL included). The schema is versioned with Alembic from the first revision: opening a
store upgrades it to the newest revision. A trial is written ``running`` when it is launched and
rewritten when it ends, so a run killed at any point loses no finished trial, and a trial left
``running`` is found and marked ``interrupted`` when the run resumes.
"""

from __future__ import annotations

import enum
import time
from pathlib import Path

from pydantic import BaseModel, Field
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from infrarsi.errors import InfraRSIError, UnknownNameError
from infrarsi.store.schema import RunRow, TrialRow
from infrarsi.trial.record import TrialStatus

MIGRATIONS = Path(__file__).parent / "migrations"


class RunStatus(str, enum.Enum):
    """A stored run's state: searching (or killed while it searched: ``running`` until it is
    resumed), ``finished`` at its budget or when nothing was left to try."""

    RUNNING = "running"
    FINISHED = "finished"

    def __str__(self) -> str:
        return self.value


class StoredRun(BaseModel):
    """A run as the store holds it."""

    run_id: str
    created_unix_s: float
    workload: str
    scale: str
    contract_hash: str
    contract_json: dict
    searcher: str
    seed: int
    budget_trials: int | None
    budget_s: float | None
    capacity_bytes: int | None
    status: RunStatus
    stop_reason: str | None = None
    ranking_json: list | None = Field(
        None,
        description="the configs the run recommends, best "
        "first: {knobs, patches, step_time_s, trials}",
    )


class StoredTrial(BaseModel):
    """A trial as the store holds it: the config, the predictions made when it was proposed,
    and (once it ended) what it measured with its full record."""

    id: int
    run_id: str
    seq: int
    config_json: dict
    status: TrialStatus
    trial_id: str | None = None
    predicted_step_time_s: float | None = None
    predicted_p_oom: float | None = None
    predicted_peak_bytes: float | None = None
    step_time_s: float | None = None
    peak_mem_bytes: float | None = None
    cost_s: float | None = None
    started_unix_s: float
    ended_unix_s: float | None = None
    error: str | None = None
    record_json: dict | None = None


class RunDirError(InfraRSIError):
    """A folder that holds no run, with the fix."""


def open_run_dir(run_dir: Path) -> tuple[Store, StoredRun]:
    """The store and the run of a run directory (its ``run.json`` names both)."""
    import json

    info_path = Path(run_dir) / "run.json"
    if not info_path.exists():
        raise RunDirError(
            f"{run_dir} holds no run (no run.json): run `infrarsi run CONTRACT` "
            "first, or give the run directory it printed"
        )
    info = json.loads(info_path.read_text())
    store = Store(info["store_url"])
    return store, store.run(info["run_id"])


def sqlite_url(run_dir: Path) -> str:
    """The default store of a run directory."""
    return f"sqlite:///{Path(run_dir).resolve() / 'run.sqlite'}"


class Store:
    """Runs and trials behind a SQLAlchemy engine, upgraded to the newest schema on open."""

    def __init__(self, url: str):
        self.url = url
        self.engine = create_engine(url)
        upgrade(self.engine)

    def create_run(self, run: StoredRun) -> StoredRun:
        """Insert a new run."""
        with Session(self.engine) as s, s.begin():
            s.add(RunRow(**run.model_dump()))
        return run

    def run(self, run_id: str) -> StoredRun:
        """The run called ``run_id``; KeyError naming the runs the store holds otherwise."""
        with Session(self.engine) as s:
            row = s.get(RunRow, run_id)
            if row is None:
                known = [r for (r,) in s.execute(select(RunRow.run_id))]
                raise UnknownNameError(f"no run {run_id!r} in {self.url}; it holds {known}")
            return StoredRun.model_validate(row, from_attributes=True)

    def runs(self) -> list[StoredRun]:
        """Every run, oldest first."""
        with Session(self.engine) as s:
            rows = s.scalars(select(RunRow).order_by(RunRow.created_unix_s))
            return [StoredRun.model_validate(r, from_attributes=True) for r in rows]

    def set_run_status(self, run_id: str, status: RunStatus, reason: str | None = None) -> None:
        """Mark a run ``running``, ``finished`` or ``stopped`` (with why)."""
        with Session(self.engine) as s, s.begin():
            row = s.get(RunRow, run_id)
            row.status, row.stop_reason = status, reason

    def set_ranking(self, run_id: str, ranking: list[dict]) -> None:
        """Write the configs the run recommends, best first (what Apply re-measures)."""
        with Session(self.engine) as s, s.begin():
            s.get(RunRow, run_id).ranking_json = ranking

    def start_trial(
        self, run_id: str, seq: int, config: dict, predictions: dict | None = None
    ) -> int:
        """Write a trial as ``running`` before it is launched; returns its row id."""
        p = predictions or {}
        with Session(self.engine) as s, s.begin():
            row = TrialRow(
                run_id=run_id,
                seq=seq,
                config_json=config,
                status=TrialStatus.RUNNING,
                predicted_step_time_s=p.get("step_time_s"),
                predicted_p_oom=p.get("p_oom"),
                predicted_peak_bytes=p.get("peak_bytes"),
                started_unix_s=time.time(),
            )
            s.add(row)
            s.flush()
            return row.id

    def finish_trial(
        self,
        row_id: int,
        status: TrialStatus,
        *,
        trial_id: str | None = None,
        step_time_s: float | None = None,
        peak_mem_bytes: float | None = None,
        cost_s: float | None = None,
        error: str | None = None,
        record: dict | None = None,
    ) -> None:
        """Write what a trial measured; its status becomes final."""
        if not TrialStatus(status).is_finished():
            raise ValueError(f"trial status {status!r}: one of {TrialStatus.finished()}")
        with Session(self.engine) as s, s.begin():
            row = s.get(TrialRow, row_id)
            row.status, row.trial_id, row.step_time_s = status, trial_id, step_time_s
            row.peak_mem_bytes, row.cost_s, row.error = peak_mem_bytes, cost_s, error
            row.record_json, row.ended_unix_s = record, time.time()

    def restart_trial(self, row_id: int, predictions: dict | None = None) -> None:
        """An interrupted trial launched again: the same row, ``running`` once more (so the
        store keeps each proposed trial exactly once)."""
        p = predictions or {}
        with Session(self.engine) as s, s.begin():
            row = s.get(TrialRow, row_id)
            if row.status != TrialStatus.INTERRUPTED:
                raise ValueError(f"trial row {row_id} is {row.status}, not interrupted")
            row.status, row.error, row.ended_unix_s = TrialStatus.RUNNING, None, None
            row.started_unix_s = time.time()
            row.predicted_step_time_s = p.get("step_time_s", row.predicted_step_time_s)
            row.predicted_p_oom = p.get("p_oom", row.predicted_p_oom)
            row.predicted_peak_bytes = p.get("peak_bytes", row.predicted_peak_bytes)

    def trials(self, run_id: str) -> list[StoredTrial]:
        """Every trial of a run in the order proposed."""
        with Session(self.engine) as s:
            rows = s.scalars(
                select(TrialRow)
                .where(TrialRow.run_id == run_id)
                .order_by(TrialRow.seq, TrialRow.id)
            )
            return [StoredTrial.model_validate(r, from_attributes=True) for r in rows]

    def interrupt_running(self, run_id: str) -> list[StoredTrial]:
        """Mark the trials a killed run left ``running`` as ``interrupted``; returns them."""
        with Session(self.engine) as s, s.begin():
            rows = list(
                s.scalars(
                    select(TrialRow).where(
                        TrialRow.run_id == run_id, TrialRow.status == TrialStatus.RUNNING
                    )
                )
            )
            for row in rows:
                row.status, row.ended_unix_s = TrialStatus.INTERRUPTED, time.time()
                row.error = "the run was stopped while this trial ran; it is proposed again"
            return [StoredTrial.model_validate(r, from_attributes=True) for r in rows]


def upgrade(engine, migrations: Path = MIGRATIONS) -> None:
    """Bring a schema to the newest Alembic revision of ``migrations`` (the store's, or the
    bank's, which names its own version table in its ``env.py``)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def revision(engine, version_table: str = "alembic_version") -> str | None:
    """The schema revision a store (or, with its version table, the bank) is at."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(
            connection, opts={"version_table": version_table}
        ).get_current_revision()
