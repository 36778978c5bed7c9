"""``infrarsi run``: the screen of the Run stage — a live table of trials (status, predicted vs
measured step time and memory, the best so far) and the final answer, or one JSON object."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from infrarsi.bank import advice_for, ingest_run
from infrarsi.cli.errors import user_error
from infrarsi.contract import load_contract
from infrarsi.errors import InfraRSIError
from infrarsi.executors import Executor, LocalExecutor
from infrarsi.executors.choice import make_executor
from infrarsi.proposers import LLMBudget, check_kind, make_proposer
from infrarsi.records import DoctorReport, RunResult
from infrarsi.run.loop import RunError, RunLoop
from infrarsi.store.bank import BankStore
from infrarsi.units import format_bytes


def run_command(
    contract_path: Path | None,
    budget: int | None,
    budget_s: float | None,
    searcher: str,
    resume: Path | None,
    run_dir: Path | None,
    store_url: str | None,
    seed: int,
    as_json: bool,
    out: Console,
    err: Console,
    bank: str | None = None,
    use_bank: bool = True,
    proposing: tuple = (None, None),
    executor: tuple = ("local", None),
    parallel: int = 1,
) -> None:
    """Start or resume a run; print its table and its result. A new run starts from the
    experience bank's advice; every run adds what it measured to the bank. ``proposing``:
    (the proposer's kind or None for the default, the LLM's budget); a resumed run keeps the
    patches proposed before and asks for more only when a kind is given again. ``executor``:
    (``local`` or ``ray``, the Ray address); ``parallel``: search trials in flight at once."""
    screen = _Screen(err if as_json else out)
    try:
        bank_store = BankStore(bank) if use_bank else None
        kind, llm_budget = proposing
        if resume is not None:
            contract = load_contract(contract_path) if contract_path else None
            runner = make_executor(executor[0], Path(resume).resolve(), executor[1])
            proposer = (
                _proposer(kind, contract, Path(resume), None, llm_budget, err, runner)
                if kind
                else None
            )
            with screen.live():
                result = RunLoop.resume(
                    resume,
                    contract,
                    on_event=screen.event,
                    proposer=proposer,
                    executor=runner,
                    parallel=parallel,
                )
        else:
            if contract_path is None:
                raise RunError("give a contract (from `infrarsi init`) or --resume RUN_DIR")
            contract = load_contract(contract_path)
            report = _doctor_report(contract, contract_path)
            directory = run_dir or Path(".infrarsi") / "runs" / contract.contract_hash[:12]
            advice = advice_for(contract, report, bank_store) if bank_store is not None else None
            check_kind(kind)  # a missing endpoint fails before the run directory is made
            runner = make_executor(executor[0], Path(directory).resolve(), executor[1])
            loop = RunLoop(
                contract,
                directory,
                searcher,
                budget,
                budget_s,
                store_url,
                executor=runner,
                parallel=parallel,
                seed=seed,
                doctor_report=report,
                on_event=screen.event,
                bank_advice=advice,
                proposer=_proposer(kind, contract, directory, report, llm_budget, err, runner),
            )
            with screen.live():
                result = loop.start()
        if bank_store is not None:
            added = ingest_run(Path(result.run_dir), bank_store)
            err.print(
                f"bank: {added.added} experiences added to {bank_store.url}",
                markup=False,
                highlight=False,
            )
    except InfraRSIError as exc:
        user_error(err, exc)
    if as_json:
        print(json.dumps(result.model_dump(mode="json")))
    else:
        _summary(result, out)


def _proposer(
    kind,
    contract,
    run_dir: Path,
    report,
    llm_budget,
    err: Console,
    executor: Executor | None = None,
):
    """The proposer of a run (``proposers.make_proposer``), its notes on the error console."""
    if contract is None:
        raise RunError(
            "asking for more patches on resume needs the contract: give it with --resume"
        )
    return make_proposer(
        kind,
        contract,
        Path(run_dir),
        executor or LocalExecutor(run_dir),
        report,
        llm_budget or LLMBudget(),
        on_note=lambda text: err.print(text, markup=False, highlight=False),
    )


def _doctor_report(contract, contract_path: Path) -> DoctorReport | None:
    """The Doctor's report of this contract, when one was written beside the trials."""
    for folder in (Path(".infrarsi") / "trials", Path(contract_path).parent):
        path = folder / f"doctor-{contract.contract_hash[:12]}.json"
        if path.exists():
            return DoctorReport.load(path)
    return None


class _Screen:
    """Turns the loop's events into a live Rich table (plain lines when not a terminal)."""

    def __init__(self, console: Console):
        self.console = console
        self.rows: list[tuple] = []
        self.best = "-"
        self._live: Live | None = None

    def live(self):
        import contextlib

        if not self.console.is_terminal:
            return contextlib.nullcontext()
        self._live = Live(self._table(), console=self.console, refresh_per_second=4)
        return self._live

    def event(self, kind: str, data: dict) -> None:
        if kind == "start":
            self.console.print(
                f"run {data['run_id']} in {data['run_dir']}: "
                f"{data['candidates']} candidates"
                + (
                    f", {data['resumed']} trials resumed, {data['requeued']} interrupted re-queued"
                    if data["resumed"] or data["requeued"]
                    else ""
                ),
                markup=False,
                highlight=False,
            )
            return
        if kind == "launch":
            if self._live is None:
                self.console.print(
                    f"  trial {data['seq']}: {data['config'].describe()} ...",
                    markup=False,
                    highlight=False,
                )
            return
        outcome, predicted = data["outcome"], data["predicted"] or {}
        best = data["best"]
        self.best = best.describe() if best is not None else "-"
        row = (
            str(data["seq"]),
            outcome.status,
            _seconds(predicted.get("step_time_s")),
            _seconds(outcome.step_time_s),
            _bytes(predicted.get("peak_bytes")),
            _bytes(outcome.peak_bytes),
            f"{predicted['p_oom']:.2f}" if "p_oom" in predicted else "-",
            f"{outcome.cost_s:.1f}",
            data["config"].describe(),
        )
        self.rows.append(row)
        if self._live is not None:
            self._live.update(self._table())
        else:
            self.console.print(
                f"  trial {row[0]}: {row[1]} step {row[3]} (predicted {row[2]}), "
                f"peak {row[5]} (predicted {row[4]}, P(OOM) {row[6]}), "
                f"cost {row[7]} s; best so far: {self.best}",
                markup=False,
                highlight=False,
            )

    def _table(self) -> Table:
        table = Table(title=f"best so far: {self.best}", title_justify="left")
        for name in (
            "#",
            "status",
            "step s (pred)",
            "step s",
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
