"""The experience bank's tables (SQLAlchemy): what every run measured, with the hardware and
workload signatures it was measured under, patch texts stored once by content, and the seeds the
bank gave later runs with whether they held. Changed only through a migration
(``bank_migrations/``, its own version table)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class BankBase(DeclarativeBase):
    """Declarative base of the bank's tables."""


class ExperienceRow(BankBase):
    """One measured trial (or one Apply verdict), normalised to its host's baseline."""

    __tablename__ = "experiences"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # run/stage/trial: a run ingested twice is stored once
    key: Mapped[str] = mapped_column(String(255), unique=True)
    created_unix_s: Mapped[float] = mapped_column(Float)
    run_id: Mapped[str] = mapped_column(String(64), index=True)
    contract_hash: Mapped[str] = mapped_column(String(64))
    stage: Mapped[str] = mapped_column(String(16))  # doctor, run, apply
    workload: Mapped[str] = mapped_column(String(128))
    scale: Mapped[str] = mapped_column(String(64))
    hardware_fp: Mapped[str] = mapped_column(String(32), index=True)
    hardware_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    workload_fp: Mapped[str] = mapped_column(String(32), index=True)
    workload_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    knobs_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    patches_json: Mapped[list[Any]] = mapped_column(JSON)  # [{"id": .., "sha256": ..}]
    status: Mapped[str] = mapped_column(String(16))
    speedup: Mapped[float | None] = mapped_column(Float, nullable=True)
    censored: Mapped[bool] = mapped_column(Boolean, default=False)
    ranked_time_per_step_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    baseline_ranked_time_per_step_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    peak_mem_bytes: Mapped[float | None] = mapped_column(Float, nullable=True)
    baseline_peak_mem_bytes: Mapped[float | None] = mapped_column(Float, nullable=True)
    capacity_bytes: Mapped[float | None] = mapped_column(Float, nullable=True)
    peak_share: Mapped[float | None] = mapped_column(Float, nullable=True)
    cost_s: Mapped[float | None] = mapped_column(Float, nullable=True)


class PatchTextRow(BankBase):
    """A patch's text, stored once under the SHA-256 of its content."""

    __tablename__ = "patch_texts"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    patch_id: Mapped[str] = mapped_column(String(128))
    text: Mapped[str] = mapped_column(Text)


class SeedRow(BankBase):
    """A seed the bank gave a run (revision 0002): from where, what it expected, and — once
    that run was ingested — what it measured here and whether it held."""

    __tablename__ = "seeds"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(64), index=True)
    created_unix_s: Mapped[float] = mapped_column(Float)
    knobs_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    patches_json: Mapped[list[Any]] = mapped_column(JSON)
    expected_speedup: Mapped[float] = mapped_column(Float)
    similarity: Mapped[float] = mapped_column(Float)
    source_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    measured_speedup: Mapped[float | None] = mapped_column(Float, nullable=True)
    held: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
