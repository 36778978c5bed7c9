"""What the stages say while they work, as typed events: a stage starting, a trial launched and
ended (with its record), Apply's measurements, the bank's advice, notes. The screens
(``cli/``) render them; nothing below the screens prints. A stage takes one ``EventSink`` and
calls it with these records, never with a loose dict.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from infrarsi.records import BankSeed, CandidateResult, Measurement, Prediction
from infrarsi.records.trial import TrialRecord, TrialStatus
from infrarsi.stages import Stage
from infrarsi.store import StoredTrial


@dataclass(frozen=True, kw_only=True)
class StageStarted:
    """A stage of ``optimize`` begins in round ``round``; ``budget_trials``: the search's, for
    ``run``."""

    stage: Stage
    round: int
    budget_trials: int | None = None


@dataclass(frozen=True, kw_only=True)
class Note:
    """Something a person should read (an instruction clause not understood, a proposer's
    remark)."""

    text: str
    round: int | None = None


@dataclass(frozen=True, kw_only=True)
class RunStarted:
    """The search starts (or resumes) in ``run_dir`` over ``candidates`` configs."""

    run_id: str
    run_dir: str
    candidates: int
    resumed: int = 0
    requeued: int = 0


@dataclass(frozen=True, kw_only=True)
class PatchesAsked:
    """The search asks its proposer for code patches after ``trials`` trials."""

    proposer: str
    trials: int


@dataclass(frozen=True, kw_only=True)
class PatchesProposed:
    """What the proposer's patches became: the ids of those accepted (validated)."""

    proposer: str
    accepted: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class TrialLaunched:
    """A search trial was launched: its sequence number, what its config changes from the
    baseline (``changes``), and what the models predicted of it."""

    seq: int
    changes: str
    predicted: Prediction | None = None


@dataclass(frozen=True, kw_only=True)
class TrialEnded:
    """A trial of the Doctor or of the search ended: ``trial`` as the round's store now holds
    it (its stage, label or sequence number, its status as the stage counts it — a trial cut
    short without a bound on record counts as a timeout — its record and the predictions made
    of it), with what the search says of it: what it ``changes`` from the baseline,
    ``ranked_time_per_step_s`` (what the search ranks by) and ``best`` (what it recommends
    now). The event carries the ledger's entry, not a copy of its fields."""

    trial: StoredTrial
    changes: str = ""
    ranked_time_per_step_s: float | None = None
    best: str | None = None

    @property
    def stage(self) -> Stage:
        return self.trial.stage

    @property
    def status(self) -> TrialStatus:
        return self.trial.status

    @property
    def seq(self) -> int:
        return self.trial.seq

    @property
    def label(self) -> str:
        return self.trial.label or ""

    @property
    def record(self) -> TrialRecord | None:
        return self.trial.record

    @property
    def peak_bytes(self) -> float | None:
        return self.trial.peak_mem_bytes

    @property
    def predicted(self) -> Prediction:
        return self.trial.predicted


@dataclass(frozen=True, kw_only=True)
class ApplyPlanned:
    """Apply will measure ``candidates`` interleaved with the baseline (``baseline_knobs``)
    over ``rounds``."""

    candidates: list[CandidateResult]
    rounds: int
    baseline_knobs: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class MeasurementLaunched:
    """Apply launched measurement ``index`` of ``total`` (the plan shrinks as candidates drop)."""

    index: int
    total: int
    round: int
    label: str


@dataclass(frozen=True, kw_only=True)
class MeasurementEnded:
    """Apply's measurement ``index`` of ``total`` ended, with verify's verdict on it."""

    index: int
    total: int
    measurement: Measurement


@dataclass(frozen=True, kw_only=True)
class CandidateDropped:
    """A candidate leaves Apply's rounds before round ``round``: a check failed, or its
    interval lies below 1 (``ratios``: its per-round log ratios so far)."""

    round: int
    label: str
    why: str
    ratios: list[float] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class BankAdvised:
    """The experience bank's advice for a round: how many experiences it holds, how many were
    similar enough to use, and the seeds it gives."""

    round: int
    url: str
    experiences: int
    used: int
    seeds: list[BankSeed] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class BankIngested:
    """A round's outcomes went into the experience bank."""

    round: int
    url: str
    added: int


Event = (
    StageStarted
    | Note
    | RunStarted
    | PatchesAsked
    | PatchesProposed
    | TrialLaunched
    | TrialEnded
    | ApplyPlanned
    | MeasurementLaunched
    | MeasurementEnded
    | CandidateDropped
    | BankAdvised
    | BankIngested
)
EventSink = Callable[[Event], None]


def ignore(event: Event) -> None:
    """The sink of a caller that shows nothing."""
