"""Typed records the stages hand each other: the Doctor's report (``doctor.json``), Run's result
with its ranking, what Apply measured and decided (``apply.json``), the Report's files and
headline, which Run, Apply, Report and ``optimize`` read. A stage never
imports another stage; it reads these. Stored records carry a schema version and are written
and read through one ``to_json`` / ``from_json`` pair."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from infrarsi.contract import Equivalence
from infrarsi.records.bank import BANK_ADVICE_FILE as BANK_ADVICE_FILE
from infrarsi.records.bank import BANK_ADVICE_SCHEMA_VERSION as BANK_ADVICE_SCHEMA_VERSION
from infrarsi.records.bank import BankAdvice as BankAdvice
from infrarsi.records.bank import BankIngest as BankIngest
from infrarsi.records.bank import BankSeed as BankSeed
from infrarsi.records.bank import bank_features as bank_features
from infrarsi.records.bank import seed_held as seed_held
from infrarsi.records.base import Configured, Frozen, known_version
from infrarsi.records.trial import TrialStatus
from infrarsi.trial.arrivals import Timing

APPLY_FILE = "apply.json"
AUDIT_FILE = "audit.jsonl"  # one line per finished trial of a run, written as it ends
DOCTOR_BASELINE_LABEL = "baseline run"  # the Doctor's baseline trials' labels start with it
DOCTOR_FILE = "doctor.json"
DOCTOR_SCHEMA_VERSION = 1
APPLY_SCHEMA_VERSION = 1


class Prediction(Frozen):
    """What the search's models said of a config when they proposed it."""

    ranked_time_per_step_s: float | None = Field(
        None, description="the objective's time per step (what the search ranks by)"
    )
    p_oom: float | None = Field(None, description="the probability it runs out of memory")
    peak_bytes: float | None = Field(None, description="the per-rank peak, median")


class Noise(Frozen):
    """The noise of this baseline on this host, on the contract's objective."""

    cv_within: float = Field(description="coefficient of variation of steady steps in a run")
    cv_between: float = Field(description="coefficient of variation between repeated runs")
    objective: str
    runs: int
    mde_pct: dict[str, float] = Field(description="minimum detectable speed-up (%) by repeats")
    recommended_repeats: int
    method: str
    outside_share: float = Field(
        0.0, description="share of the compared time outside the timed steps (start-up, ...)"
    )
    amdahl_bound: float | None = Field(
        None, description="most a change to the steps can gain on the objective; None: no bound"
    )
    cv_timed: float | None = Field(
        None,
        description="a throughput objective: the per-round coefficient of variation of a "
        "patch's step by the harness's clock (launch to exit over timed_steps)",
    )
    timed_steps: int | None = Field(
        None, description="the optimizer steps Apply times a patch over (launch to exit)"
    )
    headroom: str = Field("", description="what the objective can gain, as a sentence")
    undetectable: bool = Field(
        False, description="no change to the steps can gain what Apply's rounds detect"
    )


class Finding(Frozen):
    """One diagnosed waste: what, the numbers behind it, the knobs and patches that address
    it (``suggests``), the roles it looks for, its share of the step."""

    finding: str
    evidence: str
    suggests: list[str]
    roles: list[str]
    share_of_step: float
    note: str | None = None


class DoctorRun(Frozen):
    """One of the baseline's repeated runs."""

    trial_id: str
    warmup_steps_detected: int
    step_time_s: float
    cv: float


class DoctorTrial(Frozen):
    """A trial the Doctor ran (a baseline run, the profiled run, a calibration run)."""

    label: str
    trial_id: str
    status: TrialStatus
    trial_dir: str
    cost_s: float = 0.0
    knobs: dict[str, Any] = Field({}, description="the knob assignment it ran")
    ranked_time_per_step_s: float | None = Field(
        None, description="the objective's time per step (objective.ranked_step_time_s)"
    )


class DoctorReport(Frozen):
    """What the Doctor measured before searching: the baseline's steady step time and phases,
    top operators, MFU, peak memory per rank, the noise, the ranked diagnosis and the
    tolerances it calibrated; every trial it ran. Run reads the diagnosis, the report shows
    the rest."""

    schema_version: int = DOCTOR_SCHEMA_VERSION
    contract_hash: str
    contract_hash_after: str | None = Field(
        None, description="the contract re-sealed with the noise policy and the tolerances"
    )
    workload: str
    scale: str
    knobs: dict[str, Any]
    step_time_s: float
    tokens_per_s: float
    e2e_time_s: float
    compile_time_s: float
    phases: dict[str, float] = Field(
        description="mean seconds per steady step of the slowest rank, per phase"
    )
    phases_per_rank: list[dict[str, float]] = []
    phase_step_time_s: float | None = None
    unattributed_s: float | None = None
    not_measured: dict[str, str] = {}
    mfu_pct: float | None = None
    flops_per_token: float | None = None
    flops_formula: str | None = None
    mfu_formula: str | None = None
    peak_flops: dict[str, float]
    peak_mem_bytes: list[int | None]
    peak_mem_source: str
    hardware: dict[str, Any]
    noise: Noise
    timing: Timing | None = Field(
        None,
        description="the baseline by the harness's clock: launch to exit, start line, "
        "warm-up, steady span (medians) and their spreads; what the search's arrivals are "
        "checked against",
    )
    runs: list[DoctorRun]
    top_ops: list[dict[str, Any]] = []
    diagnosis: list[Finding] = []
    equivalence: Equivalence = Equivalence()
    equivalence_notes: list[str] = []
    warnings: list[str] = []
    trials: list[DoctorTrial] = []
    run_dir: str | None = Field(
        None,
        description="a Doctor run by hand: the run folder whose ledger its trials went into "
        "as they ended (``infrarsi run`` continues that run); None within optimize",
    )
    run_id: str | None = Field(None, description="that ledger's run")

    @field_validator("schema_version")
    @classmethod
    def _readable(cls, version: int) -> int:
        return known_version(version, DOCTOR_SCHEMA_VERSION, "doctor.json")

    def trial_folders(self) -> list[tuple[str, str | None]]:
        """Each trial's (folder, label): where the store reads the Doctor's records from."""
        return [(t.trial_dir, t.label) for t in self.trials]

    def to_json(self) -> str:
        """The report as stored (``doctor.json``)."""
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str) -> DoctorReport:
        """A stored report; ValueError when it is not one."""
        return cls.model_validate_json(text)

    def save(self, path: Path) -> Path:
        """Write the report, atomically."""
        tmp = Path(path).with_suffix(".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(path)
        return Path(path)

    @classmethod
    def load(cls, path: Path) -> DoctorReport:
        """Read a report written by ``save``."""
        return cls.from_json(Path(path).read_text())


class RankedConfig(Frozen, Configured):
    """One config a run recommends to Apply, with what the store measured of it."""

    knobs: dict[str, Any]
    patches: list[str]
    trials: int = Field(0, description="ok trials of it in the run")
    step_time_s: float | None = Field(
        None, description="median steady step time of those trials (the store's step_time_s)"
    )


class Best(Frozen, Configured):
    """The recommended config of a run."""

    knobs: dict[str, Any]
    patches: list[str]
    step_time_s: float | None


class RunResult(Frozen):
    """What a run did: where it lives, how many trials, why it stopped, what it recommends
    (``best``) and the ranking it hands Apply, best first (also stored with the run)."""

    run_dir: str
    run_id: str
    searcher: str
    trials: int
    oom_trials: int
    slow_trials: int = Field(0, description="trials cut short at the search's bound")
    interrupted_requeued: int = 0
    stop_reason: str
    best: Best | None
    ranking: list[RankedConfig] = []
    baseline_step_time_s: float | None = None


class Measurement(Frozen):
    """One trial of Apply's interleaved rounds, with the verdict of ``verify`` on it."""

    round: int
    seed: int | None = Field(
        None, description="the round's challenge seed (None: the contract's seeds)"
    )
    label: str = Field(description="baseline, or the candidate's label (c1, c2, ...)")
    trial_id: str
    trial_dir: str = Field("", description="the trial's folder: its record.json and logs")
    status: TrialStatus
    compared_s: float | None = Field(
        None, description="the time compared (see ApplyResult.compared)"
    )
    timed_against: str | None = Field(
        None,
        description="a patch under a throughput objective: the trial of the same knobs "
        "without it whose launch to exit its own is charged against (verify.clock)",
    )
    step_time_s: float | None = Field(None, description="the steady step by its lines' arrival")
    e2e_time_s: float | None = None
    tokens_per_s: float | None = None
    peak_mem_bytes: int | None = None
    cost_s: float
    valid: bool | None = Field(None, description="verify's verdict (None for the baseline)")
    reasons: list[str] = []
    flags: list[str] = []
    not_checked: list[str] = []
    ran: list[str] = Field(
        [],
        description="the comparisons verify made beyond the baseline (same-knob reference, the "
        "patch at fp32, the precision that ran, process ownership)",
    )

    @classmethod
    def of_verdict(cls, verdict: Mapping[str, Any] | None) -> Measurement | None:
        """The measurement an Apply trial's stored verdict holds: the one reader of what
        Apply's rounds store (None: a reference run's verdict, or no verdict)."""
        if not verdict or "measurement" not in verdict:
            return None
        return cls.model_validate(verdict["measurement"])


class ReferenceRun(Frozen, Configured):
    """A run Apply measured for ``verify`` alone: a candidate's knobs without its patch (or at
    fp32), never timed against anything."""

    role: str = Field(description="same_knobs, fp32_same_knobs or fp32_candidate")
    knobs: dict[str, Any]
    patches: list[str]
    seed: int | None = Field(None, description="the challenge seed it ran at")
    trial_id: str
    trial_dir: str = ""
    status: TrialStatus
    uncapped: bool = Field(
        False, description="it did not fit the capacity without the patch and ran uncapped"
    )
    cost_s: float
    for_labels: list[str] = Field([], description="the candidates it was a reference of")


class CandidateResult(Frozen, Configured):
    """A re-measured candidate: its speed-up over the neighbouring baselines round by round,
    the interval over rounds, and whether every repeat passed every check."""

    label: str
    knobs: dict[str, Any]
    patches: list[str]
    search_step_time_s: float | None = Field(None, description="what the search measured")
    ratios: list[float] = Field([], description="baseline time / candidate time, per round")
    speedup: float | None = Field(None, description="geometric mean of the ratios")
    ci_low: float | None = None
    ci_high: float | None = None
    verified: bool = False
    reasons: list[str] = []
    promoted: bool = False


class ApplyResult(Frozen):
    """What Apply did and decided: the rounds, every measurement, each candidate's interval,
    the promoted winner (or none) and the files written."""

    schema_version: int = APPLY_SCHEMA_VERSION
    run_dir: str
    run_id: str
    contract_hash: str
    workload: str
    scale: str
    compared: str = Field(
        description="the time compared, by the harness's clock: e2e_time_s "
        "(launch to exit, plus the patch's remapping) for an end-to-end "
        "objective, harness_step_time_s (steady step) for throughput"
    )
    rounds: int
    evidence: str = Field(
        "", description="how strong the evidence behind the verdicts was (verify.evidence_strength)"
    )
    confidence: float
    method: str
    baseline: dict[str, Any] = Field(
        description="knobs, and medians over rounds: step_time_s, "
        "e2e_time_s, tokens_per_s, peak_mem_bytes"
    )
    candidates: list[CandidateResult]
    measurements: list[Measurement]
    references: list[ReferenceRun] = Field(
        [], description="the runs verify needed besides the rounds' (their cost included)"
    )
    promoted: str | None = Field(None, description="label of the promoted candidate")
    decision: str
    files: dict[str, str] = {}

    @field_validator("schema_version")
    @classmethod
    def _readable(cls, version: int) -> int:
        return known_version(version, APPLY_SCHEMA_VERSION, "apply.json")

    @property
    def winner(self) -> CandidateResult | None:
        """The promoted candidate, if any."""
        return next((c for c in self.candidates if c.label == self.promoted), None)

    def save(self, run_dir: Path) -> Path:
        """Write ``apply.json`` into the run directory, atomically."""
        path = Path(run_dir) / APPLY_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json(indent=2))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, run_dir: Path) -> ApplyResult:
        """Read ``apply.json`` of a run directory (FileNotFoundError when Apply did not run)."""
        return cls.model_validate_json((Path(run_dir) / APPLY_FILE).read_text())


class ReportSide(Frozen):
    """The baseline or the winner as the report's headline shows it (medians of Apply's
    rounds)."""

    knobs: dict[str, Any]
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    peak_mem_bytes: float | None = None
    mfu_pct: float | None = None


class ReportWinner(ReportSide, Configured):
    """The promoted candidate: its speed-up and interval, rounds, and what it changes, why."""

    patches: list[str]
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    rounds: int
    changes: list[str] = Field(description="each change with why (patch title, finding)")


class ReportSummary(Frozen):
    """The headline of a run's report: what was searched, what it cost, what was promoted."""

    workload: str
    scale: str
    run_id: str
    searcher: str
    trials: int
    oom_trials: int
    slow_trials: int = 0
    search_cost_s: float
    capacity_bytes: int | None
    applied: bool
    compared: str | None
    promoted: bool
    decision: str
    baseline: ReportSide
    winner: ReportWinner | None = None
    headroom: str | None = Field(
        None, description="what the objective can gain at this scale (the Doctor's Amdahl bound)"
    )


class Report(Frozen):
    """What the Report stage wrote: its two documents, its figures and the headline."""

    markdown: str = Field(description="path of report.md")
    html: str = Field(description="path of the self-contained report.html")
    figures: list[str] = Field([], description="paths of the figures (PNG) beside report.md")
    summary: ReportSummary

    def to_json(self) -> str:
        """The record as JSON."""
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str) -> Report:
        """A record written by ``to_json``."""
        return cls.model_validate_json(text)


@dataclass(frozen=True, kw_only=True)
class RunStart:
    """What a run starts from besides the contract: the Doctor's report (its diagnosis,
    calibration and noise) and the experience bank's advice, either of which may be missing,
    and the run the store already holds for it (``run_id``: opened before the Doctor, which
    stored its trials there as they ended; None: a new one)."""

    doctor_report: DoctorReport | None = None
    bank_advice: BankAdvice | None = None
    run_id: str | None = None

    @classmethod
    def kept_in(cls, run_dir: Path) -> RunStart:
        """The report and advice a run keeps in its directory (``doctor.json``,
        ``bank_advice.json``)."""
        doctor, advice = Path(run_dir) / DOCTOR_FILE, Path(run_dir) / BANK_ADVICE_FILE
        return cls(
            doctor_report=DoctorReport.load(doctor) if doctor.exists() else None,
            bank_advice=BankAdvice.load(advice) if advice.exists() else None,
        )
