"""The store every stage reads and writes: runs and their trials, over SQLAlchemy.

SQLite in the run directory by default (``run.sqlite``), any SQLAlchemy URL otherwise
(PostgreSQL included). The schema is versioned with Alembic from the first revision: opening a
store upgrades it to the newest revision. A trial is written ``running`` when it is launched and
rewritten when it ends, so a run killed at any point loses no finished trial, and a trial left
``running`` is found when the run resumes: kept ``interrupted`` ("driver lost", not charged)
and proposed again in a new row.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, case, create_engine, func, select
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from infrarsi.errors import InfraRSIError, UnknownNameError
from infrarsi.records import Prediction, RankedConfig
from infrarsi.records.trial import TrialRecord, TrialStatus
from infrarsi.redact import STORE_URL_ENV, masked_url, scrub, unmasked
from infrarsi.stages import TRIAL_STAGES, Stage
from infrarsi.store.schema import Base, RunRow, TrialRow
from infrarsi.store.stored import RunStatus as RunStatus
from infrarsi.store.stored import StoredRun as StoredRun
from infrarsi.store.stored import StoredTrial as StoredTrial

MIGRATIONS = Path(__file__).parent / "migrations"
RowT = TypeVar("RowT", bound=Base)


class RunDirError(InfraRSIError):
    """A folder that holds no run, with the fix."""


class StoreError(InfraRSIError):
    """A store (or bank) database that cannot be reached or opened, with the fix."""


def unreachable(what: str, url: str, exc: Exception) -> str:
    """Why a database could not be opened, in the driver's first line (any password in it
    masked), and what to check."""
    reason = scrub(str(getattr(exc, "orig", None) or exc).strip().splitlines()[0])
    return (
        f"cannot open the {what} at {url!r}: {reason}; check the URL, and that the server "
        "runs and accepts connections from here"
    )


@dataclass(frozen=True)
class Ledger:
    """One round's ledger handle: the store and the run it holds. Opened once by whoever
    composes the round (``optimize``, or a command run by hand, with ``of_run_dir``) and
    passed down: a stage given one reads and writes the round through it, opens no store of
    its own and subscribes no one (the composer's listeners hear every trial it finishes)."""

    store: Store
    run_id: str

    @classmethod
    def of_run_dir(cls, run_dir: Path) -> Ledger:
        """The ledger a run directory's ``run.json`` names (``RunDirError`` if none)."""
        store, run = open_run_dir(run_dir)
        return cls(store, run.run_id)

    @property
    def run(self) -> StoredRun:
        """The run as the store holds it now."""
        return self.store.run(self.run_id)


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
    url = unmasked(info["store_url"])
    if url is None:
        raise RunDirError(
            f"the run's store is {info['store_url']}, whose password is not written in "
            f"run.json: set {STORE_URL_ENV} to its full URL to open it"
        )
    store = Store(url)
    return store, store.run(info["run_id"])


def new_run_id() -> str:
    """A fresh run id: its start time and six random hex digits."""
    return f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def sqlite_url(run_dir: Path) -> str:
    """The default store of a run directory."""
    return f"sqlite:///{Path(run_dir).resolve() / 'run.sqlite'}"


class Store:
    """Runs and trials behind a SQLAlchemy engine, upgraded to the newest schema on open. What
    subscribes (``subscribe``) hears of every trial as this store finishes it."""

    def __init__(self, url: str):
        self.connect_url = url  # the real URL: only to connect with, never shown or written
        self.url = masked_url(url)
        self._on_trial_end: list[Callable[[StoredTrial], None]] = []
        try:
            self.engine = _engine(url)
            upgrade(self.engine)
        except (OperationalError, ArgumentError, NoSuchModuleError) as exc:
            raise StoreError(scrub(unreachable("store", self.url, exc), url)) from None

    def subscribe(self, on_trial_end: Callable[[StoredTrial], None]) -> None:
        """Call ``on_trial_end`` with each trial this store finishes from now on: a search
        trial's end, a trial of the Doctor or of Apply added (the audit's hook)."""
        self._on_trial_end.append(on_trial_end)

    def _ended(self, trial: StoredTrial) -> None:
        for listener in self._on_trial_end:
            listener(trial)

    def create_run(self, run: StoredRun) -> StoredRun:
        """Insert a new run."""
        with Session(self.engine) as s, s.begin():
            s.add(RunRow(**run.model_dump()))
        return run

    def save_run(self, run: StoredRun) -> StoredRun:
        """Write ``run`` whole: a new run inserted, one the store holds (opened before its
        Doctor) brought to these values — its sealed contract, its search — keeping its
        trials and its creation time."""
        with Session(self.engine) as s, s.begin():
            row = s.get(RunRow, run.run_id)
            if row is None:
                s.add(RunRow(**run.model_dump()))
                return run
            for name, value in run.model_dump(exclude={"run_id", "created_unix_s"}).items():
                setattr(row, name, value)
            s.flush()
            return StoredRun.of(row)

    def run(self, run_id: str) -> StoredRun:
        """The run called ``run_id``; KeyError naming the runs the store holds otherwise."""
        with Session(self.engine) as s:
            row = s.get(RunRow, run_id)
            if row is None:
                known = [r for (r,) in s.execute(select(RunRow.run_id))]
                raise UnknownNameError(f"no run {run_id!r} in {self.url}; it holds {known}")
            return StoredRun.of(row)

    def runs(self) -> list[StoredRun]:
        """Every run, oldest first."""
        with Session(self.engine) as s:
            rows = s.scalars(select(RunRow).order_by(RunRow.created_unix_s))
            return [StoredRun.of(r) for r in rows]

    def set_run_status(self, run_id: str, status: RunStatus, reason: str | None = None) -> None:
        """Mark a run ``running``, ``finished`` or ``stopped`` (with why)."""
        with Session(self.engine) as s, s.begin():
            row = _one(s, RunRow, run_id)
            row.status, row.stop_reason = status, reason

    def set_ranking(self, run_id: str, ranking: list[RankedConfig]) -> None:
        """Write the configs the run recommends, best first (what Apply re-measures)."""
        with Session(self.engine) as s, s.begin():
            _one(s, RunRow, run_id).ranking_json = [r.model_dump(mode="json") for r in ranking]

    def start_trial(
        self,
        run_id: str,
        seq: int,
        config: dict[str, Any],
        predictions: Prediction | None = None,
        proposed_by: str | None = None,
    ) -> int:
        """Write a search trial as ``running`` before it is launched (with what the models
        predicted and who proposed it); returns its row id."""
        p = predictions or Prediction()
        with Session(self.engine) as s, s.begin():
            row = TrialRow(
                run_id=run_id,
                seq=seq,
                proposed_by=proposed_by,
                config_json=config,
                status=TrialStatus.RUNNING,
                predicted_ranked_time_per_step_s=p.ranked_time_per_step_s,
                predicted_p_oom=p.p_oom,
                predicted_peak_bytes=p.peak_bytes,
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
        record: TrialRecord | None = None,
    ) -> StoredTrial:
        """Write what a trial measured; its status becomes final. Returns the trial as the
        store now holds it (what its listeners were told)."""
        if not TrialStatus(status).is_finished():
            raise ValueError(f"trial status {status!r}: one of {TrialStatus.finished()}")
        with Session(self.engine) as s, s.begin():
            row = _one(s, TrialRow, row_id)
            row.status, row.trial_id, row.step_time_s = status, trial_id, step_time_s
            row.peak_mem_bytes, row.cost_s, row.error = peak_mem_bytes, cost_s, error
            row.record_json = record.model_dump(mode="json") if record else None
            row.ended_unix_s = time.time()
            s.flush()
            ended = StoredTrial.of(row)
        self._ended(ended)
        return ended

    def add_trial(
        self,
        run_id: str,
        stage: Stage,
        record: TrialRecord,
        *,
        label: str | None = None,
        proposed_by: str | None = None,
        verdict: dict[str, Any] | None = None,
    ) -> StoredTrial:
        """Write a finished trial of the Doctor or of Apply (its record as it is, with what
        the stage concluded of it), once: a trial id the run already holds is not written
        again (and is returned as stored). Returns the trial as the store holds it."""
        with Session(self.engine) as s, s.begin():
            known = s.scalars(
                select(TrialRow).where(
                    TrialRow.run_id == run_id, TrialRow.trial_id == record.trial_id
                )
            ).first()
            if known is not None:
                return StoredTrial.of(known)
            seq = s.scalars(
                select(func.count())
                .select_from(TrialRow)
                .where(TrialRow.run_id == run_id, TrialRow.stage == stage)
            ).one()
            m = record.metrics
            row = TrialRow(
                run_id=run_id,
                seq=seq,
                stage=stage,
                label=label,
                proposed_by=proposed_by,
                config_json={
                    "knobs": dict(record.knobs),
                    "patches": [p.id for p in record.patches],
                },
                status=record.status,
                trial_id=record.trial_id,
                step_time_s=m.step_time_s if m else None,
                peak_mem_bytes=m.max_peak_mem_bytes if m else None,
                cost_s=record.cost_s,
                started_unix_s=record.started_unix_s,
                ended_unix_s=record.started_unix_s + record.cost_s,
                error=record.error,
                record_json=record.model_dump(mode="json"),
                verdict_json=verdict,
            )
            s.add(row)
            s.flush()
            added = StoredTrial.of(row)
        self._ended(added)
        return added

    def add_finished(
        self, run_id: str, stage: Stage, labelled: list[tuple[str, str | None]]
    ) -> None:
        """Add the finished trials of the Doctor or Apply that are not stored yet, each read
        from its folder's ``record.json`` (``labelled``: (trial folder, label) pairs; a
        folder without a record is left out)."""
        for trial_dir, label in labelled:
            path = Path(trial_dir) / "record.json"
            if trial_dir and path.is_file():
                self.add_trial(run_id, stage, TrialRecord.load(path), label=label)

    def restart_trial(self, row_id: int, predictions: Prediction | None = None) -> None:
        """An interrupted trial launched again: the same row, ``running`` once more (so the
        store keeps each proposed trial exactly once)."""
        with Session(self.engine) as s, s.begin():
            row = _one(s, TrialRow, row_id)
            if row.status != TrialStatus.INTERRUPTED:
                raise ValueError(f"trial row {row_id} is {row.status}, not interrupted")
            row.status, row.error, row.ended_unix_s = TrialStatus.RUNNING, None, None
            row.started_unix_s = time.time()
            if predictions is not None:
                row.predicted_ranked_time_per_step_s = predictions.ranked_time_per_step_s
                row.predicted_p_oom = predictions.p_oom
                row.predicted_peak_bytes = predictions.peak_bytes

    def trials(self, run_id: str, stage: Stage | None = Stage.RUN) -> list[StoredTrial]:
        """A run's trials of one stage (the search's by default; None: every stage, the
        Doctor's, then the search's, then Apply's), each stage's in the order proposed."""
        first = {s.value: i for i, s in enumerate(TRIAL_STAGES)}  # the Doctor's, ..., Apply's
        order = case(first, value=TrialRow.stage, else_=len(first))
        query = select(TrialRow).where(TrialRow.run_id == run_id)
        if stage is not None:
            query = query.where(TrialRow.stage == stage)
        with Session(self.engine) as s:
            rows = s.scalars(query.order_by(order, TrialRow.seq, TrialRow.id))
            return [StoredTrial.of(r) for r in rows]

    def interrupt_running(self, run_id: str) -> list[StoredTrial]:
        """The search trials a killed run (its driver lost) left ``running``: each kept as the
        record of that attempt — ``interrupted`` "driver lost", not charged (the budget and the
        searcher count finished trials only), under an id of its own — and proposed again as a
        new row after the run's last one, ``interrupted`` until the resumed run launches it;
        returns the new rows."""
        with Session(self.engine) as s, s.begin():
            rows = list(
                s.scalars(
                    select(TrialRow)
                    .where(
                        TrialRow.run_id == run_id,
                        TrialRow.stage == Stage.RUN,
                        TrialRow.status == TrialStatus.RUNNING,
                    )
                    .order_by(TrialRow.seq)
                )
            )
            last = s.scalar(
                select(func.max(TrialRow.seq)).where(
                    TrialRow.run_id == run_id, TrialRow.stage == Stage.RUN
                )
            )
            again = []
            for k, row in enumerate(rows, start=1):
                seq = (last or 0) + k
                row.status, row.ended_unix_s = TrialStatus.INTERRUPTED, time.time()
                row.trial_id = row.trial_id or f"driver-lost-{run_id}-{row.seq}"
                row.error = (
                    "driver lost: the run stopped while this trial ran; not charged, proposed "
                    f"again as trial {seq}"
                )
                again.append(
                    TrialRow(
                        run_id=run_id,
                        seq=seq,
                        proposed_by=row.proposed_by,
                        config_json=row.config_json,
                        status=TrialStatus.INTERRUPTED,
                        started_unix_s=time.time(),
                        error=f"proposed again: trial {row.seq} was lost with the driver",
                    )
                )
            s.add_all(again)
            s.flush()
            return [StoredTrial.of(r) for r in again]


def _one(session: Session, table: type[RowT], key: object) -> RowT:
    """The row of ``table`` with primary key ``key``; a missing one is a bug of the caller."""
    row = session.get(table, key)
    if row is None:
        raise LookupError(f"no {table.__tablename__} row {key!r} in this store")
    return row


MEMORY_URL = "sqlite://"  # a store in this process's memory, gone with it (fast tests)


def _engine(url: str) -> Engine:
    """An engine for ``url``; the in-memory store keeps one connection, so every session of
    this process sees the same database."""
    if url in (MEMORY_URL, "sqlite:///:memory:"):
        return create_engine(url, poolclass=StaticPool, connect_args={"check_same_thread": False})
    return create_engine(url)


def upgrade(engine: Engine, migrations: Path = MIGRATIONS) -> None:
    """Bring a schema to the newest Alembic revision of ``migrations`` (the store's, or the
    bank's, which names its own version table in its ``env.py``)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def revision(engine: Engine, version_table: str = "alembic_version") -> str | None:
    """The schema revision a store (or, with its version table, the bank) is at."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(
            connection, opts={"version_table": version_table}
        ).get_current_revision()
