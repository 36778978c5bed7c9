"""Typed records the stages hand each other through the run directory: what Apply measured and
decided (``apply.json``), which Report and ``optimize`` read. A stage never imports another
stage; it reads these."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

APPLY_FILE = "apply.json"


class Measurement(BaseModel):
    """One trial of Apply's interleaved rounds, with the verdict of ``verify`` on it."""
    round: int
    label: str = Field(description="baseline, or the candidate's label (c1, c2, ...)")
    trial_id: str
    trial_dir: str = Field("", description="the trial's folder: its record.json and logs")
    status: str
    compared_s: float | None = Field(None, description="the time compared (see "
                                     "ApplyResult.compared)")
    step_time_s: float | None = None
    e2e_time_s: float | None = None
    tokens_per_s: float | None = None
    peak_mem_bytes: int | None = None
    cost_s: float
    valid: bool | None = Field(None, description="verify's verdict (None for the baseline)")
    reasons: list[str] = []
    flags: list[str] = []
    not_checked: list[str] = []


class CandidateResult(BaseModel):
    """A re-measured candidate: its speed-up over the neighbouring baselines round by round,
    the interval over rounds, and whether every repeat passed every check."""
    label: str
    knobs: dict
    patches: list[str]
    search_step_time_s: float | None = Field(None, description="what the search measured")
    ratios: list[float] = Field([], description="baseline time / candidate time, per round")
    speedup: float | None = Field(None, description="geometric mean of the ratios")
    ci_low: float | None = None
    ci_high: float | None = None
    verified: bool = False
    reasons: list[str] = []
    promoted: bool = False


class ApplyResult(BaseModel):
    """What Apply did and decided: the rounds, every measurement, each candidate's interval,
    the promoted winner (or none) and the files written."""
    run_dir: str
    run_id: str
    contract_hash: str
    workload: str
    scale: str
    compared: str = Field(description="the time compared, by the harness's clock: e2e_time_s "
                          "(launch to exit, plus the patch's remapping) for an end-to-end "
                          "objective, harness_step_time_s (steady step) for throughput")
    rounds: int
    evidence: str = Field("", description="how strong the evidence behind the verdicts was "
                          "(verify.evidence_strength)")
    confidence: float
    method: str
    baseline: dict = Field(description="knobs, and medians over rounds: step_time_s, "
                           "e2e_time_s, tokens_per_s, peak_mem_bytes")
    candidates: list[CandidateResult]
    measurements: list[Measurement]
    promoted: str | None = Field(None, description="label of the promoted candidate")
    decision: str
    files: dict[str, str] = {}

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
    def load(cls, run_dir: Path) -> "ApplyResult":
        """Read ``apply.json`` of a run directory (FileNotFoundError when Apply did not run)."""
        return cls.model_validate_json((Path(run_dir) / APPLY_FILE).read_text())
