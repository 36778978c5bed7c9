"""The store's tables (SQLAlchemy): runs, and the trials each run proposed — with the models'
predictions at proposal time beside what was measured. Changed only through a migration."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """Declarative base of every table of the store."""


class RunRow(Base):
    """One search: its contract, searcher, budget and where it stands."""

    __tablename__ = "runs"
    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_unix_s: Mapped[float] = mapped_column(Float)
    workload: Mapped[str] = mapped_column(String(128))
    scale: Mapped[str] = mapped_column(String(64))
    contract_hash: Mapped[str] = mapped_column(String(64))
    contract_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    searcher: Mapped[str] = mapped_column(String(32))
    seed: Mapped[int] = mapped_column(Integer)
    budget_trials: Mapped[int | None] = mapped_column(Integer, nullable=True)
    budget_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    capacity_bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    status: Mapped[str] = mapped_column(String(16))  # RunStatus: running, finished
    stop_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    ranking_json: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)  # revision 0002


class TrialRow(Base):
    """One trial of any stage: a search trial is ``running`` when launched, final when it
    ended, ``interrupted`` when the run was killed while it ran ("driver lost": kept, not
    charged, and proposed again in a new row);
    the Doctor's and Apply's trials are written once they ended, Apply's with its verdict."""

    __tablename__ = "trials"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    config_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    trial_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    predicted_ranked_time_per_step_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_p_oom: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_peak_bytes: Mapped[float | None] = mapped_column(Float, nullable=True)
    step_time_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    peak_mem_bytes: Mapped[float | None] = mapped_column(Float, nullable=True)
    cost_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    started_unix_s: Mapped[float] = mapped_column(Float)
    ended_unix_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    record_json: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # revision 0003: which stage ran it (doctor, run, apply), its label there, who proposed it
    stage: Mapped[str] = mapped_column(String(16), default="run", server_default="run")
    label: Mapped[str | None] = mapped_column(String(128), nullable=True)
    proposed_by: Mapped[str | None] = mapped_column(String(256), nullable=True)
    # revision 0004: what the stage concluded of the trial (Apply's measurement or reference)
    verdict_json: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
