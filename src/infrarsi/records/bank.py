"""The experience bank's records: the seeds and priors it advises a run with (``bank_advice.json``)
and what a run added to it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from infrarsi.identity import canonical_value
from infrarsi.records.base import Configured, Frozen, known_version

BANK_ADVICE_SCHEMA_VERSION = 1
BANK_ADVICE_FILE = "bank_advice.json"


def seed_held(measured_speedup: float | None) -> bool | None:
    """Whether a bank seed held where it was tried: faster than the baseline measured in the
    same run (None: not measured there)."""
    return None if measured_speedup is None else measured_speedup > 1.0


def bank_features(knobs: dict[str, Any], patches: Iterable[str]) -> list[str]:
    """The features the bank's additive models read off a config: one per knob value
    (``name=value``) and one per patch (``patch:id``)."""
    return [f"{k}={canonical_value(v)}" for k, v in sorted(knobs.items())] + [
        f"patch:{p}" for p in sorted(patches)
    ]


class BankSeed(Frozen, Configured):
    """A config the bank says worked on a similar workload or host: where it came from and
    what it expects here."""

    knobs: dict[str, Any]
    patches: list[str]
    expected_speedup: float = Field(
        description="exp of the similarity-weighted mean log speed-up of its experiences"
    )
    similarity: float = Field(
        description="the largest similarity of its experiences (1: the same host and workload)"
    )
    experiences: int
    sources: list[dict[str, Any]] = Field(
        description="{run_id, hardware_fp, workload, stage} of each source run"
    )
    as_measured: dict[str, Any] = Field(
        {},
        description="the knobs whose values the source ran with "
        "differ from these (a rank count scaled to this host's cores or "
        "GPUs), as measured there",
    )
    peak_ratio: float | None = Field(
        None,
        description="its per-rank peak over its source "
        "run's baseline peak (the geometric mean over its "
        "experiences that measured both), where it ran as it reads "
        "here (no knob translated); None otherwise",
    )


class BankAdvice(Frozen):
    """What the experience bank tells a new run: seed candidates and additive priors (log
    step-time ratio to the baseline, log peak ratio to the baseline) over knob values and
    patches, each fitted on past outcomes weighted by their similarity to this host and
    workload (so a distant past says little). Written as ``bank_advice.json`` in the run."""

    schema_version: int = BANK_ADVICE_SCHEMA_VERSION
    bank_url: str
    hardware: dict[str, Any]
    workload: dict[str, Any]
    experiences: int = Field(description="experiences the bank holds")
    used: int = Field(description="experiences similar enough to weigh in")
    weight: float = Field(0.0, description="the sum of their similarities")
    time_coefficients: dict[str, float] = {}
    memory_coefficients: dict[str, float] = {}
    seeds: list[BankSeed] = []
    notes: list[str] = []

    @field_validator("schema_version")
    @classmethod
    def _readable(cls, version: int) -> int:
        return known_version(version, BANK_ADVICE_SCHEMA_VERSION, "bank_advice.json")

    def log_speed(
        self, knobs: dict[str, Any], patches: Iterable[str], baseline: dict[str, Any]
    ) -> float:
        """The bank's prior log step-time ratio of a config to the baseline (negative:
        faster)."""
        return _additive(self.time_coefficients, knobs, patches, baseline)

    def log_speed_parts(
        self, knobs: dict[str, Any], patches: Iterable[str], baseline: dict[str, Any]
    ) -> dict[str, float]:
        """``log_speed`` by the knob or patch it comes from (``name`` or ``patch:id``): the
        search trusts each part only as far as its own trials agree."""
        return _additive_parts(self.time_coefficients, knobs, patches, baseline)

    def log_peak(
        self, knobs: dict[str, Any], patches: Iterable[str], baseline: dict[str, Any]
    ) -> float:
        """The bank's prior log peak-memory ratio of a config to the baseline."""
        return _additive(self.memory_coefficients, knobs, patches, baseline)

    def save(self, path: Path) -> None:
        """Write the record as JSON."""
        Path(path).write_text(self.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: Path) -> BankAdvice:
        """A record written by ``save``."""
        return cls.model_validate_json(Path(path).read_text())


def _additive(
    coefficients: dict[str, float],
    knobs: dict[str, Any],
    patches: Iterable[str],
    baseline: dict[str, Any],
) -> float:
    return sum(_additive_parts(coefficients, knobs, patches, baseline).values())


def _additive_parts(
    coefficients: dict[str, float],
    knobs: dict[str, Any],
    patches: Iterable[str],
    baseline: dict[str, Any],
) -> dict[str, float]:
    """Per knob (and per patch), its coefficient here less the baseline's."""
    out: dict[str, float] = {}
    for sign, features in (
        (1.0, bank_features(knobs, patches)),
        (-1.0, bank_features(baseline, ())),
    ):
        for f in features:
            if f in coefficients:
                group = f if f.startswith("patch:") else f.split("=", 1)[0]
                out[group] = out.get(group, 0.0) + sign * coefficients[f]
    return out


class BankIngest(Frozen):
    """What one run added to the experience bank."""

    bank_url: str
    run_id: str
    added: int = Field(description="experiences new to the bank")
    already: int = Field(description="experiences the bank held already (a run ingested again)")
    by_stage: dict[str, int] = {}
    seeds: list[dict[str, Any]] = Field(
        [],
        description="the seeds the run was given: {knobs, patches, "
        "expected_speedup, measured_speedup, held}",
    )
