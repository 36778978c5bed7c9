"""``optimize``: Init -> Doctor -> Run -> Apply -> Report in one call, over one or more rounds.

Like the command line, this module composes the stages; no stage imports it. With ``rounds``
above one, the promoted winner becomes the next round's baseline: its patch is applied to a
copy of the workload whose knob defaults are the winner's (``derive.py``), the catalog keeps the
patches that still apply, and the search runs again from there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel, Field

from infrarsi.apply import apply_run
from infrarsi.audit import AuditLog
from infrarsi.bank import BankIngester, BankStore, advice_for
from infrarsi.callbacks import Callback, CallbackList, RoundEnd, Screen
from infrarsi.compose import Listeners, new_ledger, search_loop
from infrarsi.contract import Contract
from infrarsi.derive import derive_workload
from infrarsi.doctor import UNDETECTABLE, headroom, run_doctor, sealed_contract
from infrarsi.errors import InfraRSIError
from infrarsi.events import (
    BankAdvised,
    EventSink,
    Note,
    StageStarted,
    TrialEnded,
    ignore,
)
from infrarsi.executors.choice import make_executor
from infrarsi.folder_lock import holding
from infrarsi.init import InitError, init
from infrarsi.options import OptimizeOptions
from infrarsi.proposal import resolve
from infrarsi.proposers import check_kind
from infrarsi.records import (
    ApplyResult,
    BankAdvice,
    BankIngest,
    CandidateResult,
    DoctorReport,
    Report,
    RunResult,
    RunStart,
)
from infrarsi.records.trial import TrialRecord
from infrarsi.report import ReportWriter
from infrarsi.stages import Stage
from infrarsi.store import Ledger, RunStatus
from infrarsi.workloads import Manifest, find


class OptimizeError(InfraRSIError):
    """Bad input to ``optimize`` (an instruction that cannot be read, an unknown workload)."""


class RoundResult(BaseModel):
    """One round: its run directory, trials, and what Apply promoted."""

    round: int
    run_dir: str
    contract_hash: str
    trials: int
    oom_trials: int
    slow_trials: int = 0
    bank_seeds: list[dict] = []
    bank_added: int = 0
    search_cost_s: float
    promoted: bool
    winner: CandidateResult | None = Field(description="what Apply promoted, if anything")
    decision: str
    compared: str | None = Field(None, description="what Apply compared (ApplyResult.compared)")
    report_html: str
    report_md: str


class OptimizeResult(BaseModel):
    """What ``optimize --json`` prints: the last round's answer first, every round after."""

    run_dir: str
    promoted: bool
    winner: CandidateResult | None
    baseline: dict
    trials: int
    oom_trials: int
    cumulative_speedup: float | None
    rounds: list[RoundResult]
    wall_s: float


def make_contract_for(
    manifest: Manifest, scale: str, instruction: str, on_note: Callable[[str], None]
) -> Contract:
    """Init without questions (``--yes``): the instruction read by the rules or the LLM."""
    try:
        contract, _ = init(manifest, scale, instruction, on_note)
    except InitError as exc:
        raise OptimizeError(str(exc)) from None
    for clause in contract.not_understood:
        on_note(f"not understood (not applied): {clause!r}")
    return contract


def optimize(
    workload: str,
    instruction: str,
    options: OptimizeOptions | None = None,
    *,
    on_event: EventSink | None = None,
    confirm: Callable[[Contract], bool] | None = None,
) -> OptimizeResult:
    """Every stage, ``options.rounds`` times; returns the summary and writes each round's
    report. ``confirm`` is asked about the first contract, before anything is written; later
    rounds' contracts differ from it only in the workload they point at. Each round starts
    from the experience bank's advice and adds what it measured (``options.bank``); code
    patches come from ``options.proposer``; every trial of every stage runs where
    ``options.executor`` says, with up to ``options.search.parallel`` search trials in
    flight."""
    options = options or OptimizeOptions()
    t0, emit = time.monotonic(), on_event or ignore
    manifest = find(workload)
    manifest.scale(options.scale)
    options = replace(
        options, proposer=replace(options.proposer, kind=check_kind(options.proposer.kind))
    )
    out_dir = Path(options.out_dir)
    make_executor(options.executor.kind, out_dir, options.executor.ray_address)  # reachable?

    def note(r: int) -> Callable[[str], None]:
        return lambda text: emit(Note(text=text, round=r))

    emit(StageStarted(stage=Stage.INIT, round=1))
    contract = make_contract_for(manifest, options.scale, instruction, note(1))  # no folder yet
    if confirm is not None and not confirm(contract):
        raise OptimizeError("the contract was not confirmed: nothing was run")
    store = BankStore(options.bank.url) if options.bank.use else None
    with holding(out_dir):  # one run per folder: a second is refused before its Doctor
        done = _rounds(manifest, instruction, contract, out_dir.resolve(), options, emit, store)
        return _summary(out_dir.resolve(), *done, time.monotonic() - t0)


def _rounds(
    manifest: Manifest,
    instruction: str,
    contract: Contract,
    out_dir: Path,
    options: OptimizeOptions,
    emit: EventSink,
    store: BankStore | None,
) -> tuple[list[RoundResult], dict | None]:
    """Each round in ``out_dir`` (held), the winner of one the next's baseline: the rounds'
    results and the first baseline."""

    def note(r: int) -> Callable[[str], None]:
        return lambda text: emit(Note(text=text, round=r))

    done: list[RoundResult] = []
    first_baseline: dict | None = None
    for r in range(1, options.rounds + 1):
        result, baseline = _one_round(contract, out_dir / f"round-{r}", r, options, emit, store)
        done.append(result)
        first_baseline = first_baseline or baseline
        if result.winner is None or r == options.rounds:
            break
        winner = {
            "knobs": result.winner.knobs,
            "patches": resolve(result.winner.patches, Path(result.run_dir)),
        }
        manifest = derive_workload(
            manifest, options.scale, winner, out_dir / f"round-{r + 1}" / "workload"
        )
        emit(StageStarted(stage=Stage.DERIVE, round=r + 1))
        emit(Note(text=f"the next baseline: {manifest.root}", round=r + 1))
        emit(StageStarted(stage=Stage.INIT, round=r + 1))
        contract = make_contract_for(manifest, options.scale, instruction, note(r + 1))
    return done, first_baseline


def _one_round(
    contract: Contract,
    round_dir: Path,
    r: int,
    options: OptimizeOptions,
    emit: EventSink,
    bank: BankStore | None,
) -> tuple[RoundResult, dict]:
    """Doctor, Run, Apply once, their trials into the round's store; then the callbacks hear
    the round end: the report is written and the bank ingests the round."""
    round_dir.mkdir(parents=True, exist_ok=True)
    run_dir = (round_dir / "run").resolve()
    report, ingest = ReportWriter(), BankIngester(bank, emit) if bank is not None else None
    audit = AuditLog(run_dir, contract.objective, options.search.searcher)
    hear = CallbackList([Screen(emit), audit, report, *([ingest] if ingest else [])])
    ledger = _open_round(contract, run_dir, options, hear)
    hear.on_stage_start(StageStarted(stage=Stage.DOCTOR, round=r))
    contract, doctored = _doctor(contract, round_dir, r, options, emit, ledger)
    advice = _advice(contract, doctored, r, emit, bank)
    hear.on_stage_start(
        StageStarted(stage=Stage.RUN, round=r, budget_trials=options.search.budget.trials)
    )
    executor = make_executor(options.executor.kind, run_dir, options.executor.ray_address)
    found = search_loop(
        contract,
        run_dir,
        options.search,
        options.proposer,
        executor,
        RunStart(doctor_report=doctored, bank_advice=advice, run_id=ledger.run_id),
        Listeners(emit, lambda text: emit(Note(text=text, round=r)), ledger=ledger),
    ).start()
    hear.on_stage_start(StageStarted(stage=Stage.APPLY, round=r))
    applied = apply_run(
        run_dir,
        top_k=options.top_k,
        rounds=options.verify_rounds,
        seed=options.search.seed,
        executor=executor,
        on_event=emit,
        ledger=ledger,
    )
    hear.on_stage_start(StageStarted(stage=Stage.REPORT, round=r))
    hear.on_round_end(RoundEnd(round=r, run_dir=run_dir, run_id=ledger.run_id, ledger=ledger))
    assert report.written is not None  # written as the round ends, or that raised
    ingested = ingest.ingested if ingest else None
    return _round_result(r, contract, run_dir, found, applied, report.written, ingested)


def _round_result(
    r: int,
    contract: Contract,
    run_dir: Path,
    found: RunResult,
    applied: ApplyResult,
    written: Report,
    ingested: BankIngest | None,
) -> tuple[RoundResult, dict]:
    """What a round returns: its summary and the baseline's figures (the report's)."""
    result = RoundResult(
        round=r,
        run_dir=str(run_dir),
        contract_hash=contract.contract_hash,
        trials=found.trials,
        oom_trials=found.oom_trials,
        slow_trials=found.slow_trials,
        bank_seeds=ingested.seeds if ingested else [],
        bank_added=ingested.added if ingested else 0,
        search_cost_s=written.summary.search_cost_s,
        promoted=applied.winner is not None,
        winner=applied.winner,
        decision=applied.decision,
        compared=applied.compared,
        report_html=written.html,
        report_md=written.markdown,
    )
    base = written.summary.baseline
    return result, base.model_dump(include={"step_time_s", "mfu_pct", "knobs", "tokens_per_s"})


def _open_round(
    contract: Contract, run_dir: Path, options: OptimizeOptions, hear: Callback
) -> Ledger:
    """The round's ledger — its one store and its run — opened before the Doctor
    (``doctoring``) and handed to every stage of the round: every trial goes in as it ends —
    the Doctor's through ``_stored_then``, the search's and Apply's in their stages — and
    ``hear``, subscribed here alone, is told of each then (the audit writes its line).
    The search brings the run to its sealed contract and its own settings
    (``Store.save_run``)."""
    ledger = new_ledger(contract, run_dir, options.search, RunStatus.DOCTORING)
    ledger.store.subscribe(hear.on_trial_end)
    return ledger


def _stored_then(ledger: Ledger, emit: EventSink) -> Callable[[str, TrialRecord], None]:
    """What the Doctor calls as each of its trials ends: into the round's store, then told."""

    def ended(label: str, record: TrialRecord) -> None:
        emit(
            TrialEnded(
                trial=ledger.store.add_trial(ledger.run_id, Stage.DOCTOR, record, label=label)
            )
        )

    return ended


def _doctor(
    contract: Contract,
    round_dir: Path,
    r: int,
    options: OptimizeOptions,
    emit: EventSink,
    ledger: Ledger,
) -> tuple[Contract, DoctorReport]:
    """The Doctor's report of this round's baseline (each trial into the round's store as it
    ends), the contract sealed with it, and the objective's headroom said."""
    doctor_dir = (round_dir / "doctor-trials").resolve()
    report = run_doctor(
        contract,
        options.doctor_repeats,
        doctor_dir,
        executor=make_executor(options.executor.kind, doctor_dir, options.executor.ray_address),
        on_trial=_stored_then(ledger, emit),
    )
    contract, report = sealed_contract(contract, report)
    contract.save(round_dir / "contract.yaml")
    gain, undetectable = headroom(report)
    emit(Note(text=f"objective headroom: {gain}", round=r))
    if undetectable:  # said before the budget is spent; the search still runs
        emit(Note(text=f"warning: {UNDETECTABLE}", round=r))
    return contract, report


def _advice(
    contract: Contract,
    report: DoctorReport,
    r: int,
    emit: EventSink,
    bank: BankStore | None,
) -> BankAdvice | None:
    """The experience bank's advice for this round (None without a bank)."""
    if bank is None:
        return None
    advice = advice_for(contract, report, bank)
    emit(
        BankAdvised(
            round=r,
            url=bank.url,
            experiences=advice.experiences,
            used=advice.used,
            seeds=list(advice.seeds),
        )
    )
    return advice


def _summary(
    out_dir: Path, done: list[RoundResult], baseline: dict | None, wall_s: float
) -> OptimizeResult:
    promoted = [r for r in done if r.promoted]
    cumulative = None
    if promoted:
        cumulative = 1.0
        for r in promoted:
            cumulative *= r.winner.speedup if r.winner and r.winner.speedup else 1.0
    last = promoted[-1] if promoted else done[-1]
    result = OptimizeResult(
        run_dir=last.run_dir,
        promoted=bool(promoted),
        winner=last.winner if promoted else None,
        baseline=baseline or {},
        trials=sum(r.trials for r in done),
        oom_trials=sum(r.oom_trials for r in done),
        cumulative_speedup=cumulative,
        rounds=done,
        wall_s=wall_s,
    )
    (out_dir / "optimize.json").write_text(json.dumps(result.model_dump(mode="json"), indent=2))
    return result
