"""The experience bank's store: every experience a run adds, read back by any later run.

SQLite by default (``~/.infrarsi/bank.sqlite``, or ``INFRARSI_BANK`` / ``--bank URL``),
PostgreSQL by URL for a team. The schema is versioned with Alembic in its own version table
(``bank_alembic_version``), so a bank may live in the same database as run stores; opening a
bank upgrades it. Concurrent writers lose nothing: SQLite runs in WAL mode with a busy timeout
and every write transaction is retried on a lock; on PostgreSQL each write is one transaction,
and an experience (keyed by run, stage and trial) inserted twice is stored once.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field
from sqlalchemy import Engine, create_engine, delete, event, func, select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from infrarsi import store
from infrarsi.errors import InfraRSIError, UnknownNameError
from infrarsi.identity import ConfigKey, config_key
from infrarsi.records.trial import TrialStatus
from infrarsi.redact import masked_url, scrub
from infrarsi.stages import Stage
from infrarsi.store.bank_schema import ExperienceRow, PatchTextRow, SeedRow

MIGRATIONS = Path(__file__).parent / "bank_migrations"
VERSION_TABLE = "bank_alembic_version"  # named in bank_migrations/env.py too
# an export file's format version: 2 names an experience's times ``ranked_time_per_step_s``
# and ``baseline_ranked_time_per_step_s``; a version 1 file's older names are read as those
EXPORT_VERSION = 2
EXPORT_RENAMED = {  # version 1 -> 2
    "step_time_s": "ranked_time_per_step_s",
    "baseline_step_time_s": "baseline_ranked_time_per_step_s",
}
DEFAULT_PATH = Path.home() / ".infrarsi" / "bank.sqlite"
RETRIES = 8
T = TypeVar("T")


class Experience(BaseModel):
    """One measured outcome with what it was measured under. ``speedup`` is the host's
    baseline time per step over this one's, measured in the same run (for a ``censored``
    outcome — an OOM or a trial cut short as slow — an upper bound); ``peak_share`` is the
    largest per-rank peak over the per-rank capacity (at least 1 for an OOM)."""

    id: int | None = None
    key: str = Field(description="run/stage/trial: what makes an experience unique")
    created_unix_s: float
    run_id: str
    contract_hash: str
    stage: Stage = Field(description="doctor, run or apply: the stage that ran the trial")
    workload: str
    scale: str
    hardware_fp: str
    hardware_json: dict[str, Any]
    workload_fp: str
    workload_json: dict[str, Any]
    knobs_json: dict[str, Any]
    patches_json: list[dict[str, Any]] = Field(description="[{id, sha256}] of the patches applied")
    status: TrialStatus
    speedup: float | None = None
    censored: bool = False
    ranked_time_per_step_s: float | None = Field(
        None, description="what the search ranked the trial by (the objective's time per step)"
    )
    baseline_ranked_time_per_step_s: float | None = None
    peak_mem_bytes: float | None = None
    baseline_peak_mem_bytes: float | None = None
    capacity_bytes: float | None = None
    peak_share: float | None = None
    cost_s: float | None = None


class StoredSeed(BaseModel):
    """A seed the bank gave a run, with its source and (once known) whether it held."""

    id: int | None = None
    run_id: str
    created_unix_s: float
    knobs_json: dict[str, Any]
    patches_json: list[str]
    expected_speedup: float
    similarity: float
    source_json: dict[str, Any]
    measured_speedup: float | None = None
    held: bool | None = None


class BankError(InfraRSIError):
    """A bank that cannot be opened or read, with the fix."""


def bank_url(url: str | None = None) -> str:
    """The bank to use: ``url``, else ``INFRARSI_BANK``, else ``~/.infrarsi/bank.sqlite``. A
    plain path is taken as a SQLite file."""
    url = url or os.environ.get("INFRARSI_BANK") or str(DEFAULT_PATH)
    if "://" not in url:
        path = Path(url).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{path}"
    return url


class BankStore:
    """Experiences, patch texts and seeds behind a SQLAlchemy engine."""

    def __init__(self, url: str | None = None):
        real = bank_url(url)
        self.url = masked_url(real)  # what is shown and written: never its password
        sqlite = real.startswith("sqlite")
        try:
            self.engine = create_engine(real, connect_args={"timeout": 30} if sqlite else {})
        except Exception as exc:  # a bad URL or a missing driver
            raise BankError(
                f"cannot open the bank {self.url!r}: {scrub(str(exc), real)}; give --bank "
                "sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
            ) from None
        if sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        try:
            self._retry(lambda: upgrade(self.engine))
        except OperationalError as exc:
            raise BankError(store.unreachable("experience bank", self.url, exc)) from None

    # -- writing ---------------------------------------------------------------------------
    def add(
        self, experiences: list[Experience], patch_texts: dict[str, tuple[str, str]] | None = None
    ) -> int:
        """Store experiences not stored yet (by ``key``) and patch texts not stored yet (by
        SHA-256: ``{sha: (patch_id, text)}``), in one transaction; returns how many
        experiences were new."""
        patch_texts = patch_texts or {}

        def write() -> int:
            with Session(self.engine) as s, s.begin():
                keys = [e.key for e in experiences]
                have = set()
                for chunk in range(0, len(keys), 500):
                    have |= set(
                        s.scalars(
                            select(ExperienceRow.key).where(
                                ExperienceRow.key.in_(keys[chunk : chunk + 500])
                            )
                        )
                    )
                new = [e for e in experiences if e.key not in have]
                s.add_all(ExperienceRow(**e.model_dump(exclude={"id"})) for e in new)
                shas = set(
                    s.scalars(
                        select(PatchTextRow.sha256).where(
                            PatchTextRow.sha256.in_(list(patch_texts))
                        )
                    )
                )
                s.add_all(
                    PatchTextRow(sha256=sha, patch_id=pid, text=text)
                    for sha, (pid, text) in patch_texts.items()
                    if sha not in shas
                )
                return len(new)

        return self._retry(write)

    def add_seeds(self, seeds: list[StoredSeed]) -> list[int]:
        """Record the seeds a run was given; returns their ids."""

        def write() -> list[int]:
            with Session(self.engine) as s, s.begin():
                rows = [SeedRow(**x.model_dump(exclude={"id"})) for x in seeds]
                s.add_all(rows)
                s.flush()
                return [r.id for r in rows]

        return self._retry(write)

    def set_seed_outcome(
        self, seed_id: int, measured_speedup: float | None, held: bool | None
    ) -> None:
        """What a seed measured in the run it was given to, and whether it held."""

        def write() -> None:
            with Session(self.engine) as s, s.begin():
                row = s.get(SeedRow, seed_id)
                if row is None:
                    raise UnknownNameError(f"no seed {seed_id} in the bank {self.url}")
                row.measured_speedup, row.held = measured_speedup, held

        self._retry(write)

    def forget_run(self, run_id: str) -> int:
        """Remove every experience and seed of one run; returns how many experiences went."""

        def write() -> int:
            with Session(self.engine) as s, s.begin():
                gone = s.execute(delete(ExperienceRow).where(ExperienceRow.run_id == run_id))
                s.execute(delete(SeedRow).where(SeedRow.run_id == run_id))
                return int(getattr(gone, "rowcount", 0) or 0)

        return self._retry(write)

    # -- reading ---------------------------------------------------------------------------
    def experiences(
        self,
        *,
        workload: str | None = None,
        hardware_fp: str | None = None,
        run_id: str | None = None,
        stage: str | None = None,
    ) -> list[Experience]:
        """Experiences, oldest first, optionally of one workload, host, run or stage."""
        query = select(ExperienceRow).order_by(ExperienceRow.id)
        for column, value in (
            (ExperienceRow.workload, workload),
            (ExperienceRow.hardware_fp, hardware_fp),
            (ExperienceRow.run_id, run_id),
            (ExperienceRow.stage, stage),
        ):
            if value is not None:
                query = query.where(column == value)
        with Session(self.engine) as s:
            return [_experience(r) for r in s.scalars(query)]

    def experience(self, experience_id: int) -> Experience:
        """One experience by id; KeyError with the ids' range otherwise."""
        with Session(self.engine) as s:
            row = s.get(ExperienceRow, experience_id)
            if row is None:
                lo, hi = s.execute(
                    select(func.min(ExperienceRow.id), func.max(ExperienceRow.id))
                ).one()
                raise UnknownNameError(
                    f"no experience {experience_id} in {self.url}; ids run {lo}..{hi}"
                    if lo is not None
                    else f"the bank {self.url} is empty"
                )
            return _experience(row)

    def seeds(self, run_id: str | None = None) -> list[StoredSeed]:
        """Seeds given to runs (to one run), oldest first."""
        query = select(SeedRow).order_by(SeedRow.id)
        if run_id is not None:
            query = query.where(SeedRow.run_id == run_id)
        with Session(self.engine) as s:
            return [_seed(r) for r in s.scalars(query)]

    def patch_text(self, sha256: str) -> str | None:
        """A stored patch's text by its content hash."""
        with Session(self.engine) as s:
            row = s.get(PatchTextRow, sha256)
            return row.text if row else None

    def patch_texts(self) -> dict[str, tuple[str, str]]:
        """Every stored patch text: ``{sha: (patch_id, text)}``."""
        with Session(self.engine) as s:
            return {r.sha256: (r.patch_id, r.text) for r in s.scalars(select(PatchTextRow))}

    # -- moving a bank ---------------------------------------------------------------------
    def export(self, path: Path) -> dict[str, int]:
        """Write the whole bank to one JSON file (experiences, patch texts, seeds)."""
        data: dict[str, Any] = {
            "format": "infrarsi-bank",
            "version": EXPORT_VERSION,
            "experiences": [e.model_dump(mode="json", exclude={"id"}) for e in self.experiences()],
            "patch_texts": {sha: list(v) for sha, v in self.patch_texts().items()},
            "seeds": [x.model_dump(mode="json", exclude={"id"}) for x in self.seeds()],
        }
        Path(path).write_text(json.dumps(data, indent=1))
        return {k: len(data[k]) for k in ("experiences", "patch_texts", "seeds")}

    def import_file(self, path: Path) -> dict[str, int]:
        """Add what an exported file holds; experiences already here (by key) are skipped."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:  # missing, a folder, not text, not JSON
            raise BankError(f"{path}: not a bank export ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != "infrarsi-bank":
            raise BankError(
                f'{path}: not a bank export (no "format": "infrarsi-bank"); '
                "write one with `infrarsi bank export FILE`"
            )
        try:
            old = data.get("version", 1) < 2
            experiences = [
                _experience(_renamed(e) if old else e) for e in data.get("experiences", [])
            ]
            texts = {sha: tuple(v) for sha, v in data.get("patch_texts", {}).items()}
            seeds = [_seed(x) for x in data.get("seeds", [])]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BankError(
                f"{path}: a bank export whose entries cannot be read ({type(exc).__name__}: "
                f"{exc}): export it again with `infrarsi bank export FILE`"
            ) from None
        added = self.add(experiences, texts)
        seen = {_seed_key(x) for x in self.seeds()}  # one seed of a run per configuration
        new_seeds = [x for x in seeds if _seed_key(x) not in seen]
        if new_seeds:
            self.add_seeds(new_seeds)
        return {"experiences": added, "skipped": len(experiences) - added, "seeds": len(new_seeds)}

    # -- robustness ------------------------------------------------------------------------
    def _retry(self, fn: Callable[[], T]) -> T:
        """Run a transaction again when another writer held the lock (SQLite) or a
        concurrent insert of the same key won (both engines)."""
        for attempt in range(RETRIES):
            try:
                return fn()
            except (OperationalError, IntegrityError) as exc:
                transient = isinstance(exc, IntegrityError) or any(
                    word in str(exc).lower()
                    for word in ("locked", "busy", "deadlock", "could not serialize")
                )
                if not transient or attempt == RETRIES - 1:
                    raise
                time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
        raise AssertionError("unreachable")


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    """WAL lets readers run beside a writer; the busy timeout makes writers wait their turn."""
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def upgrade(engine: Engine) -> None:
    """Bring the bank's schema to the newest Alembic revision."""
    store.upgrade(engine, MIGRATIONS)


def revision(engine: Engine) -> str | None:
    """The schema revision a bank is at."""
    return store.revision(engine, VERSION_TABLE)


def _renamed(entry: dict[str, Any]) -> dict[str, Any]:
    """A version 1 export's experience under the names of version 2 (``EXPORT_RENAMED``)."""
    return {EXPORT_RENAMED.get(k, k): v for k, v in entry.items()}


def _experience(source: object) -> Experience:
    """An experience as stored: a row of the bank, or an entry of an export file."""
    return Experience.model_validate(source, from_attributes=True)


def _seed_key(seed: StoredSeed) -> tuple[str, ConfigKey]:
    """A seed's identity in the bank: its run and its configuration (``identity.config_key``)."""
    return seed.run_id, config_key(seed.knobs_json, seed.patches_json)


def _seed(source: object) -> StoredSeed:
    """A seed as stored: a row of the bank, or an entry of an export file."""
    return StoredSeed.model_validate(source, from_attributes=True)
