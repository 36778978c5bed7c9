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
from pathlib import Path

from pydantic import BaseModel

from infrarsi.apply import apply_run
from infrarsi.bank import BankStore, advice_for, ingest_run
from infrarsi.contract import Contract
from infrarsi.derive import derive_workload
from infrarsi.doctor import run_doctor, sealed_contract
from infrarsi.errors import InfraRSIError
from infrarsi.executors.choice import make_executor
from infrarsi.init import InitError, init
from infrarsi.proposal import resolve
from infrarsi.proposers import LLMBudget, check_kind, make_proposer
from infrarsi.report import write_report
from infrarsi.run.loop import RunLoop
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
    winner: dict | None
    decision: str
    report_html: str
    report_md: str


class OptimizeResult(BaseModel):
    """What ``optimize --json`` prints: the last round's answer first, every round after."""

    run_dir: str
    promoted: bool
    winner: dict | None
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
    scale: str,
    budget: int | None,
    rounds: int,
    out_dir: Path,
    top_k: int = 3,
    doctor_repeats: int = 3,
    verify_rounds: int | None = None,
    seed: int = 0,
    on_stage: Callable[[str, dict], None] | None = None,
    confirm: Callable[[Contract], bool] | None = None,
    bank: str | None = None,
    use_bank: bool = True,
    proposer: str | None = None,
    llm_budget: LLMBudget = LLMBudget(),
    executor: str = "local",
    ray_address: str | None = None,
    parallel: int = 1,
) -> OptimizeResult:
    """Every stage, ``rounds`` times; returns the summary and writes each round's report.
    ``confirm`` is asked about the first contract, before anything is written; later rounds'
    contracts differ from it only in the workload they point at. ``bank``: the experience
    bank's URL (default ``INFRARSI_BANK`` or ``~/.infrarsi/bank.sqlite``); each round starts
    from its advice and adds what it measured; ``use_bank=False`` is a cold start that
    leaves the bank as it was. ``proposer``: where code patches come from (``catalog``,
    ``llm``, ``both``; None: ``both`` when an LLM endpoint is configured), with
    ``llm_budget`` capping the LLM's calls, tokens and seconds per round. ``executor``: where
    every trial of every stage runs (``local``, or ``ray`` on the cluster at ``ray_address``),
    with up to ``parallel`` search trials in flight."""
    t0, emit = time.monotonic(), on_stage or (lambda stage, data: None)
    try:
        manifest = find(workload)
        manifest.scale(scale)
        proposing = (check_kind(proposer), llm_budget)
        make_executor(executor, Path(out_dir), ray_address)  # Ray reachable, before any trial
    except (ValueError, KeyError) as exc:
        raise OptimizeError(exc.args[0] if exc.args else str(exc)) from None

    def note(r: int) -> Callable[[str], None]:
        return lambda text: emit("note", {"round": r, "text": text})

    emit("init", {"round": 1})
    contract = make_contract_for(manifest, scale, instruction, note(1))  # before any folder
    if confirm is not None and not confirm(contract):
        raise OptimizeError("the contract was not confirmed: nothing was run")
    store = BankStore(bank) if use_bank else None
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    done: list[RoundResult] = []
    first_baseline: dict | None = None
    for r in range(1, rounds + 1):
        result, baseline = _one_round(
            contract,
            budget,
            out_dir / f"round-{r}",
            top_k,
            (doctor_repeats, verify_rounds),
            seed,
            r,
            emit,
            store,
            proposing,
            (executor, ray_address, parallel),
        )
        done.append(result)
        first_baseline = first_baseline or baseline
        if not result.promoted or r == rounds:
            break
        winner = {**result.winner, "patches": resolve(result.winner["patches"], result.run_dir)}
        manifest = derive_workload(manifest, scale, winner, out_dir / f"round-{r + 1}" / "workload")
        emit("derive", {"round": r + 1, "workload": str(manifest.root)})
        emit("init", {"round": r + 1})
        contract = make_contract_for(manifest, scale, instruction, note(r + 1))
    return _summary(out_dir, done, first_baseline, time.monotonic() - t0)


def _one_round(
    contract: Contract,
    budget,
    round_dir: Path,
    top_k,
    repeats,
    seed,
    r,
    emit,
    bank: BankStore | None = None,
    proposing: tuple[str, LLMBudget] = ("catalog", LLMBudget()),
    running: tuple = ("local", None, 1),
) -> tuple[RoundResult, dict]:
    """Doctor, Run, Apply and Report once, then the bank ingests the round; ``repeats`` is
    (Doctor's baseline runs, Apply's rounds or None); ``proposing`` (the proposer's kind, the
    LLM's budget); ``running`` (the executor's kind, the Ray address, trials in flight)."""
    repeats, verify_rounds = repeats
    round_dir.mkdir(parents=True, exist_ok=True)
    emit("doctor", {"round": r})
    doctor_dir = (round_dir / "doctor-trials").resolve()
    kind, address, parallel = running
    report = run_doctor(
        contract,
        repeats,
        doctor_dir,
        executor=make_executor(kind, doctor_dir, address),
        on_trial=lambda label, rec: emit(
            "trial", {"stage": "doctor", "label": label, "status": rec.status.value}
        ),
    )
    contract, report = sealed_contract(contract, report)
    contract.save(round_dir / "contract.yaml")
    advice = advice_for(contract, report, bank) if bank is not None else None
    if advice is not None:
        emit(
            "bank",
            {
                "round": r,
                "url": bank.url,
                "experiences": advice.experiences,
                "used": advice.used,
                "seeds": [s.model_dump() for s in advice.seeds],
            },
        )
    emit("run", {"round": r, "budget": budget})
    run_dir = (round_dir / "run").resolve()
    executor = make_executor(kind, run_dir, address)
    proposer = make_proposer(
        proposing[0],
        contract,
        run_dir,
        executor,
        report,
        proposing[1],
        on_note=lambda text: emit("note", {"round": r, "text": text}),
    )
    loop = RunLoop(
        contract,
        run_dir,
        "infrarsi",
        budget,
        None,
        seed=seed,
        executor=executor,
        parallel=parallel,
        doctor_report=report,
        bank_advice=advice,
        proposer=proposer,
        on_event=lambda kind, data: emit("search", {"kind": kind, **data}),
    )
    found = loop.start()
    emit("apply", {"round": r})
    applied = apply_run(
        round_dir / "run",
        top_k=top_k,
        rounds=verify_rounds,
        seed=seed,
        executor=executor,
        on_event=lambda kind, data: emit("verify", {"kind": kind, **data}),
    )
    emit("report", {"round": r})
    written = write_report(round_dir / "run")
    ingested = ingest_run(round_dir / "run", bank) if bank is not None else None
    if ingested is not None:
        emit("bank-ingest", {"round": r, "added": ingested.added, "url": bank.url})
    winner = applied.winner
    result = RoundResult(
        round=r,
        run_dir=str(round_dir / "run"),
        contract_hash=contract.contract_hash,
        trials=found.trials,
        oom_trials=found.oom_trials,
        slow_trials=found.slow_trials,
        bank_seeds=ingested.seeds if ingested else [],
        bank_added=ingested.added if ingested else 0,
        search_cost_s=written.summary.search_cost_s,
        promoted=winner is not None,
        winner={
            "knobs": winner.knobs,
            "patches": winner.patches,
            "speedup": winner.speedup,
            "ci_low": winner.ci_low,
            "ci_high": winner.ci_high,
        }
        if winner
        else None,
        decision=applied.decision,
        report_html=written.html,
        report_md=written.markdown,
    )
    base = written.summary.baseline
    return result, base.model_dump(include={"step_time_s", "mfu_pct", "knobs", "tokens_per_s"})


def _summary(
    out_dir: Path, done: list[RoundResult], baseline: dict | None, wall_s: float
) -> OptimizeResult:
    promoted = [r for r in done if r.promoted]
    cumulative = None
    if promoted:
        cumulative = 1.0
        for r in promoted:
            cumulative *= r.winner["speedup"]
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
