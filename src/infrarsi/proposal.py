"""Code patches proposed during a run — what every stage reads of them, and the interface the
run loop calls.

A *proposer* (the ``proposers`` stage: the workload's catalog, an LLM) hands the run loop
patches that passed validation; the loop adds them to the search's candidates. A proposed patch
lives in the run directory (``proposals/<id>.diff``, content-addressed by its diff's sha256) and
its id *is* that relative path, so every executor rooted at the run directory, Apply, the
winner's patch and the bank resolve it as a diff file, with nothing else to look up.
``proposals.jsonl`` holds one line per LLM reply, in order (accepted or rejected, at which
stage, why, what it cost); the accepted ones also carry their patch id and provenance.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from infrarsi.enums import ValueEnum
from infrarsi.identity import Configuration
from infrarsi.records.trial import TrialRecord, TrialStatus

PROPOSALS_DIR = "proposals"
PROPOSALS_LOG = "proposals.jsonl"
LLM_PREFIX = "llm-"  # the file name of every LLM patch starts so
STAGES = ("parse", "files", "apply", "compile", "screen", "smoke")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Expectation(_Frozen):
    """What a proposal says it will do, as ratios to the baseline (0.8 = 20% lower), and the
    finding it addresses: the search's prior for it until it is measured."""

    step_time_ratio: float = Field(1.0, gt=0.05, lt=20)
    peak_mem_ratio: float = Field(1.0, gt=0.05, lt=20)
    addresses: str = ""


class ProposalStatus(ValueEnum):
    """What became of an LLM reply: a patch that passed every check, or not."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"


class ProposalLine(_Frozen):
    """One LLM reply and what became of it (a line of ``proposals.jsonl``)."""

    n: int
    status: ProposalStatus
    stage: Literal["parse", "files", "apply", "compile", "screen", "smoke"]
    reason: str
    diff_sha256: str | None = None
    tokens: int = 0
    seconds: float = 0.0
    model: str = ""
    prompt_sha256: str = ""
    patch_id: str | None = Field(
        None, description="accepted: the patch's id (its path in the run directory)"
    )
    expectation: Expectation | None = None
    smoke_speedup: float | None = Field(
        None,
        description="the smoke trial's speed-up over the "
        "smoke baseline (tiny scale: a sanity figure, not a "
        "measurement of the gain)",
    )


class ProposedPatch(_Frozen):
    """A validated patch the search may try: its id (the diff's path in the run directory),
    its stated expectation (a prior the models down-weight until measured), who wrote it."""

    patch_id: str
    diff_sha256: str
    expectation: Expectation = Expectation()
    proposed_by: str = Field(description="'llm:<model>' for an LLM's patch")
    prompt_sha256: str = ""
    title: str = ""

    @classmethod
    def of_line(cls, line: ProposalLine) -> ProposedPatch:
        """The patch an accepted line of ``proposals.jsonl`` stands for."""
        expectation = line.expectation or Expectation()
        return cls(
            patch_id=line.patch_id,
            diff_sha256=line.diff_sha256 or "",
            expectation=expectation,
            proposed_by=f"llm:{line.model}",
            prompt_sha256=line.prompt_sha256,
            title=expectation.addresses or f"LLM proposal {line.n}",
        )


class PatchOutcome(_Frozen):
    """What the search measured of one patch so far: trials with it, their median speed-up
    and peak over the baseline's, and how the failed ones ended."""

    patch_id: str
    trials: int
    speedup: float | None = None
    peak_mem_ratio: float | None = None
    failures: list[str] = []


class ProposalState(_Frozen):
    """What a proposer is told before it proposes: the trials so far, per patch."""

    trials_done: int
    outcomes: list[PatchOutcome] = []


# where a proposer's own trials go as each ends (label, record): the run's ledger
TrialSink = Callable[[str, TrialRecord], object]


class Proposer(Protocol):
    """What the run loop calls. ``propose`` returns the patches it newly accepted (validated;
    empty when it has nothing, or its budget is spent); ``accepted`` every patch accepted in
    this run directory so far (a resumed run searches them again); ``searches_catalog``
    whether the workload's own catalog patches are candidates too. The trials a proposer runs
    to validate its patches (smoke trials) are told to ``on_trial`` as each ends."""

    name: str

    @property
    def searches_catalog(self) -> bool: ...

    def wants_more(self) -> bool: ...

    def propose(
        self, state: ProposalState, on_trial: TrialSink | None = None
    ) -> list[ProposedPatch]: ...

    def accepted(self) -> list[ProposedPatch]: ...


class ProposesNothing:
    """A proposer that proposes nothing during the run: the workload's catalog is searched,
    with whatever ``accepted`` returns."""

    name = "nothing"
    searches_catalog = True

    def wants_more(self) -> bool:
        return False

    def propose(
        self, state: ProposalState, on_trial: TrialSink | None = None
    ) -> list[ProposedPatch]:
        return []

    def accepted(self) -> list[ProposedPatch]:
        return []


class Recorded(ProposesNothing):
    """A proposer that proposes nothing more: the patches a run directory's
    ``proposals.jsonl`` accepted, with the catalog (a run resumed without its proposer still
    searches every patch it had)."""

    name = "recorded"

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)

    def accepted(self) -> list[ProposedPatch]:
        return [
            ProposedPatch.of_line(x)
            for x in read_lines(self.run_dir)
            if x.status is ProposalStatus.ACCEPTED and x.patch_id
        ]


def is_proposed(patch_id: str) -> bool:
    """Whether a config's patch id is a proposed patch (a diff in the run's proposals)."""
    return patch_id.startswith(PROPOSALS_DIR + "/")


def read_lines(run_dir: Path) -> list[ProposalLine]:
    """Every line of a run directory's ``proposals.jsonl`` (empty without one)."""
    path = Path(run_dir) / PROPOSALS_LOG
    if not path.exists():
        return []
    return [
        ProposalLine.model_validate_json(line)
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def append_line(run_dir: Path, line: ProposalLine) -> None:
    """Add one line to ``proposals.jsonl`` (flushed at once: a killed run loses none)."""
    with open(Path(run_dir) / PROPOSALS_LOG, "a") as out:
        out.write(line.model_dump_json() + "\n")
        out.flush()


def proposed_by(run_dir: Path) -> dict[str, str]:
    """Patch id -> who proposed it ('llm:<model>'), for the accepted lines of a run."""
    return {
        line.patch_id: ProposedPatch.of_line(line).proposed_by
        for line in read_lines(run_dir)
        if line.status is ProposalStatus.ACCEPTED and line.patch_id
    }


def who_proposed(patches: Iterable[str], writers: dict[str, str], chose: str | None) -> str | None:
    """Who a trial's config came from: the writers of its proposed patches (``writers``:
    ``proposed_by``), then who chose the config (the searcher), ``via`` between them."""
    wrote = sorted({writers[p] for p in patches if p in writers})
    if not wrote:
        return chose
    return " + ".join(wrote) + (f" via {chose}" if chose else "")


def resolve(patches: list[str], run_dir: Path) -> list[str]:
    """Patch ids as something any working directory can apply: a proposed patch's id becomes
    its absolute path; a catalog id or an absolute diff path stays."""
    return [str(Path(run_dir).resolve() / p) if is_proposed(p) else p for p in patches]


class FinishedTrial(Protocol):
    """What a proposer and the report read of one finished search trial: the store's
    ``StoredTrial`` as it is."""

    @property
    def configuration(self) -> Configuration: ...
    @property
    def status(self) -> TrialStatus: ...
    @property
    def step_time_s(self) -> float | None: ...
    @property
    def peak_mem_bytes(self) -> float | None: ...
    @property
    def error(self) -> str | None: ...


def patch_outcomes(rows: Sequence[FinishedTrial], baseline_knobs: dict) -> list[PatchOutcome]:
    """Per patch, what the finished trials that carried it measured, over the baseline's
    trials (the baseline's knobs, no patch)."""
    want = Configuration.of(baseline_knobs)
    base = [r for r in rows if r.status.is_ok() and r.configuration == want]
    base_time = _median([r.step_time_s for r in base])
    base_peak = _median([r.peak_mem_bytes for r in base])
    out = []
    for pid in sorted({p for r in rows for p in r.configuration.patches}):
        mine = [r for r in rows if pid in r.configuration.patches]
        ok = [r for r in mine if r.status.is_ok()]
        time_s = _median([r.step_time_s for r in ok])
        peak = _median([r.peak_mem_bytes for r in ok])
        fails = [
            f"{r.status}: {(r.error or '')[:160]}".rstrip(": ")
            for r in mine
            if not r.status.is_ok()
        ]
        out.append(
            PatchOutcome(
                patch_id=pid,
                trials=len(mine),
                speedup=base_time / time_s if time_s and base_time else None,
                peak_mem_ratio=peak / base_peak if peak and base_peak else None,
                failures=fails[:3],
            )
        )
    return out


def _median(values) -> float | None:
    values = [v for v in values if v]
    return statistics.median(values) if values else None
