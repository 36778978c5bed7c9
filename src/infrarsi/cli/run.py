"""``infrarsi run``: the screen of the Run stage — a live table of trials (status, predicted vs
measured step time and memory, the best so far) and the final answer, or one JSON object."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from infrarsi.bank import advice_for, ingest_run
from infrarsi.cli.answer import keep_stdout_for_the_answer, print_answer
from infrarsi.cli.errors import user_error
from infrarsi.compose import Listeners, audited, doctors_ledger, new_ledger, search_loop
from infrarsi.contract import Contract, load_contract
from infrarsi.doctor import UNDETECTABLE
from infrarsi.errors import InfraRSIError
from infrarsi.events import (
    Event,
    PatchesAsked,
    PatchesProposed,
    RunStarted,
    TrialEnded,
    TrialLaunched,
)
from infrarsi.executors import Executor
from infrarsi.executors.choice import make_executor
from infrarsi.folder_lock import holding
from infrarsi.options import (
    BankOptions,
    ExecutorOptions,
    ProposerOptions,
    SearchOptions,
)
from infrarsi.proposal import Proposer
from infrarsi.proposers import check_kind, make_proposer
from infrarsi.records import DoctorReport, Prediction, RunResult, RunStart
from infrarsi.run.loop import resume_run
from infrarsi.run.setup import RunError
from infrarsi.store import Ledger, RunDirError, RunStatus
from infrarsi.store.bank import BankStore
from infrarsi.units import format_bytes


@dataclass(frozen=True, kw_only=True)
class RunCommand:
    """``infrarsi run`` as parsed: a new run of ``contract`` (in ``run_dir``), or the run in
    ``resume`` continued."""

    contract: Path | None = None
    resume: Path | None = None
    run_dir: Path | None = None
    search: SearchOptions = field(default_factory=SearchOptions)
    bank: BankOptions = field(default_factory=BankOptions)
    proposer: ProposerOptions = field(default_factory=ProposerOptions)
    executor: ExecutorOptions = field(default_factory=ExecutorOptions)
    as_json: bool = False


def run_command(command: RunCommand, out: Console, err: Console) -> None:
    """Start or resume a run; print its table and its result. A new run starts from the
    experience bank's advice; every run adds what it measured to the bank. A resumed run
    keeps the patches proposed before and asks for more only when a proposer is given."""
    answer = keep_stdout_for_the_answer() if command.as_json else None
    screen = _Screen(err if command.as_json else out)
    try:
        bank_store = BankStore(command.bank.url) if command.bank.use else None
        if command.resume is not None:
            result, ledger = _resume(command, screen, err)
        else:
            result, ledger = _start(command, screen, err, bank_store)
        if bank_store is not None:
            added = ingest_run(Path(result.run_dir), bank_store, ledger)
            err.print(
                f"bank: {added.added} experiences added to {bank_store.url}",
                markup=False,
                highlight=False,
            )
    except InfraRSIError as exc:
        user_error(err, exc)
    if answer is not None:
        print_answer(json.dumps(result.model_dump(mode="json")), answer)
    else:
        _summary(result, out)


def _resume(command: RunCommand, screen: _Screen, err: Console) -> tuple[RunResult, Ledger]:
    """The run in ``command.resume`` continued where it stopped, and its ledger (opened here,
    heard by its audit)."""
    assert command.resume is not None
    contract = load_contract(command.contract) if command.contract else None
    resume = Path(command.resume)
    runner = make_executor(command.executor.kind, resume.resolve(), command.executor.ray_address)
    proposer = (
        _proposer(command.proposer, contract, resume, err, runner)
        if command.proposer.kind
        else None
    )
    with holding(resume, create=False), screen.live():  # the folder's before its audit
        try:
            ledger = audited(Ledger.of_run_dir(resume), resume)
        except RunDirError as exc:
            raise RunError(str(exc)) from None
        result = resume_run(
            resume,
            contract,
            on_event=screen.event,
            proposer=proposer,
            executor=runner,
            parallel=command.search.parallel,
            ledger=ledger,
        )
    return result, ledger


def _start(
    command: RunCommand, screen: _Screen, err: Console, bank_store: BankStore | None
) -> tuple[RunResult, Ledger]:
    """A new run of ``command.contract``, from the Doctor's report beside it and the bank,
    and its ledger (opened here before the search, heard by its audit)."""
    if command.contract is None:
        raise RunError("give a contract (from `infrarsi init`) or --resume RUN_DIR")
    contract = load_contract(command.contract)
    report = _doctor_report(contract, command.contract)
    if report is None and contract.noise.repeats is None:  # never doctored: said first
        err.print(
            f"warning: this contract was never doctored (no baseline measured, no noise, "
            f"tolerances not calibrated): run `infrarsi doctor {command.contract}` first; "
            "the search goes on with the default tolerances, and Apply with its default rounds",
            markup=False,
        )
    if report is not None and report.noise.undetectable:  # said before the budget is spent
        err.print(f"warning: {UNDETECTABLE} ({report.noise.headroom})", markup=False)
    directory = command.run_dir or Path(".infrarsi") / "runs" / contract.contract_hash[:12]
    if report is not None and report.run_dir is not None and command.run_dir is None:
        directory = Path(report.run_dir)  # where the Doctor, by hand, opened the run
    advice = advice_for(contract, report, bank_store) if bank_store is not None else None
    check_kind(command.proposer.kind)  # a missing endpoint fails before the folder is made
    runner = make_executor(
        command.executor.kind, Path(directory).resolve(), command.executor.ray_address
    )
    with holding(directory):  # the folder's lock before its store and audit are opened
        doctored = doctors_ledger(report, directory, command.search.store_url)
        opened = (
            doctored[1]
            if doctored is not None
            else new_ledger(contract, directory, command.search, RunStatus.RUNNING)
        )
        ledger = audited(opened, directory)
        loop = search_loop(
            contract,
            directory,
            command.search,
            command.proposer,
            runner,
            RunStart(doctor_report=report, bank_advice=advice),
            Listeners(on_event=screen.event, on_note=_noted(err), ledger=ledger),
        )
        with screen.live():
            return loop.start(), ledger


def _proposer(
    options: ProposerOptions,
    contract: Contract | None,
    run_dir: Path,
    err: Console,
    executor: Executor,
) -> Proposer:
    """The proposer of a resumed run (``proposers.make_proposer``, no Doctor's report: the run
    keeps it), its notes on the error console."""
    if contract is None:
        raise RunError(
            "asking for more patches on resume needs the contract: give it with --resume"
        )
    return make_proposer(
        options.kind, contract, Path(run_dir), executor, None, options.llm_budget, _noted(err)
    )


def _noted(err: Console) -> Callable[[str], None]:
    """A proposer's notes, printed on the error console as they come."""
    return lambda text: err.print(text, markup=False, highlight=False)


def _doctor_report(contract, contract_path: Path) -> DoctorReport | None:
    """The Doctor's report of this contract, when one was written beside the trials, beside
    the contract or in the run folder the Doctor opened (the newest there)."""
    name = f"doctor-{contract.contract_hash[:12]}.json"
    for folder in (Path(".infrarsi") / "trials", Path(contract_path).parent):
        if (folder / name).exists():
            return DoctorReport.load(folder / name)
    opened = sorted((Path(".infrarsi") / "runs").glob(f"*/{name}"), key=lambda p: p.stat().st_mtime)
    return DoctorReport.load(opened[-1]) if opened else None


class _Screen:
    """Turns the loop's events into a live Rich table (plain lines when not a terminal)."""

    def __init__(self, console: Console):
        self.console = console
        self.rows: list[tuple[str, ...]] = []
        self.best = "-"
        self._live: Live | None = None

    def live(self):
        import contextlib

        if not self.console.is_terminal:
            return contextlib.nullcontext()
        self._live = Live(self._table(), console=self.console, refresh_per_second=4)
        return self._live

    def event(self, event: Event) -> None:
        match event:
            case RunStarted():
                self._started(event)
            case TrialLaunched(seq=seq, changes=changes) if self._live is None:
                self._say(f"  trial {seq}: {changes} ...")
            case TrialEnded():
                self._ended(event)
            case PatchesAsked(proposer=proposer, trials=trials):
                self._say(f"  {proposer}: asked for a patch after {trials} trials")
            case PatchesProposed(proposer=proposer, accepted=accepted):
                self._say(f"  {proposer}: accepted {', '.join(accepted) or 'none'}")

    def _say(self, text: str) -> None:
        if self._live is None:
            self.console.print(text, markup=False, highlight=False)

    def _started(self, e: RunStarted) -> None:
        again = (
            f", {e.resumed} trials resumed, {e.requeued} interrupted re-queued"
            if e.resumed or e.requeued
            else ""
        )
        self.console.print(
            f"run {e.run_id} in {e.run_dir}: {e.candidates} candidates{again}",
            markup=False,
            highlight=False,
        )

    def _ended(self, e: TrialEnded) -> None:
        predicted = e.predicted or Prediction()
        self.best = e.best or "-"
        row = (
            str(e.seq),
            str(e.status),
            _seconds(predicted.ranked_time_per_step_s),
            _seconds(e.ranked_time_per_step_s),
            _bytes(predicted.peak_bytes),
            _bytes(e.peak_bytes),
            f"{predicted.p_oom:.2f}" if predicted.p_oom is not None else "-",
            f"{e.trial.cost_s or 0.0:.1f}",
            e.changes,
        )
        self.rows.append(row)
        if self._live is not None:
            self._live.update(self._table())
            return
        self._say(
            f"  trial {row[0]}: {row[1]} objective time/step {row[3]} (predicted {row[2]}), "
            f"peak {row[5]} (predicted {row[4]}, P(OOM) {row[6]}), "
            f"cost {row[7]} s; best so far: {self.best}{_why_failed(e)}"
        )

    def _table(self) -> Table:
        table = Table(title=f"best so far: {self.best}", title_justify="left")
        for name in (
            "#",
            "status",
            "objective s/step (pred)",
            "objective s/step",
            "peak (pred)",
            "peak",
            "P(OOM)",
            "cost s",
            "config",
        ):
            table.add_column(name, overflow="fold")
        for row in self.rows[-25:]:
            table.add_row(*row)
        return table


def _seconds(value) -> str:
    return f"{value:.4f}" if value is not None else "-"


def _bytes(value) -> str:
    return format_bytes(int(value)) if value is not None else "-"


def _summary(result: RunResult, out: Console) -> None:
    out.print(
        f"run {result.run_id}: {result.trials} trials ({result.oom_trials} out of memory), "
        f"stopped: {result.stop_reason}",
        markup=False,
        highlight=False,
    )
    if result.best is None:
        out.print("no trial ended ok: nothing to recommend", markup=False)
        return
    speed = ""
    if result.baseline_step_time_s and result.best.step_time_s:
        speed = f" ({result.baseline_step_time_s / result.best.step_time_s:.2f}x the baseline)"
    knobs = " ".join(f"{k}={v}" for k, v in result.best.knobs.items())
    out.print(
        f"best: {knobs} patches={result.best.patches or 'none'} step "
        f"{_seconds(result.best.step_time_s)} s{speed}",
        markup=False,
        highlight=False,
    )
    out.print(
        f"store: {result.run_dir}/run.sqlite; re-verify the best against the baseline "
        f"with `infrarsi apply {result.run_dir}`",
        markup=False,
        highlight=False,
    )


def _why_failed(e: TrialEnded) -> str:
    """A failed trial's reason, its last line (a crash, a refusal, a timeout), on its own line."""
    if not e.status.is_failure():
        return ""
    said = (e.trial.error or (e.record.error if e.record else "") or "").strip().splitlines()
    return f"\n    why: {said[-1][:200]}" if said else ""
