"""``infrarsi apply``: the screen of the Apply stage — progress of the interleaved rounds, the
verification table, the decision, and the files written (or one JSON object)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table

from infrarsi.apply import ApplyError, apply_run
from infrarsi.apply.branch import to_branch
from infrarsi.bank import ingest_run
from infrarsi.cli.answer import keep_stdout_for_the_answer, print_answer
from infrarsi.cli.errors import user_error
from infrarsi.compose import audited
from infrarsi.contract import load_contract
from infrarsi.errors import InfraRSIError
from infrarsi.events import (
    ApplyPlanned,
    CandidateDropped,
    Event,
    MeasurementEnded,
    MeasurementLaunched,
)
from infrarsi.executors.choice import make_executor
from infrarsi.folder_lock import holding
from infrarsi.identity import changed_knobs, describe_changes
from infrarsi.options import APPLY_TOP_K, BankOptions, ExecutorOptions
from infrarsi.records import ApplyResult, Measurement
from infrarsi.store import Ledger, RunDirError
from infrarsi.store.bank import BankStore
from infrarsi.units import format_ratio_bound


class ApplyScreen:
    """Turns Apply's events into a progress bar with the last measurement."""

    def __init__(self, console: Console):
        self.console = console
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def event(self, event: Event) -> None:
        match event:
            case ApplyPlanned(candidates=candidates, rounds=rounds, baseline_knobs=base):
                labels = ", ".join(
                    f"{c.label}: {describe_changes(c.knobs, c.patches, base)}" for c in candidates
                )
                self.console.print(
                    f"apply: {rounds} interleaved rounds of the baseline and "
                    f"{len(candidates)} candidate(s): {labels or 'none'}",
                    markup=False,
                    highlight=False,
                )
            case CandidateDropped(label=label, round=r) if self.progress is not None:
                self.progress.console.print(
                    f"  {label} dropped before round {r + 1}: it cannot be promoted any more "
                    "(a check failed, or its interval lies below 1)",
                    markup=False,
                    highlight=False,
                )
            case MeasurementLaunched() if self.progress is not None and self.task is not None:
                self.progress.update(
                    self.task,
                    total=event.total,
                    completed=event.index,
                    description=f"round {event.round + 1}: {event.label}",
                )
            case MeasurementEnded(measurement=m) if self.progress is not None:
                if self.task is not None:
                    self.progress.update(self.task, completed=event.index + 1)
                self.progress.console.print(
                    f"  round {m.round + 1} {m.label}: {m.status} "
                    f"{m.compared_s if m.compared_s is not None else '-'} s{_verdict(m)}",
                    markup=False,
                    highlight=False,
                )

    def __enter__(self):
        self.progress = Progress(console=self.console, transient=True)
        self.task = self.progress.add_task("apply", total=None)
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)
        self.progress = None


def show(result: ApplyResult, out: Console) -> None:
    """The verification table and the decision."""
    table = Table(
        title=f"apply: {result.rounds} interleaved rounds, {result.compared}, "
        f"{result.confidence:.0%} interval (Bonferroni over "
        f"{len(result.candidates)})",
        title_justify="left",
    )
    for col in (
        "candidate",
        "patches",
        "knobs changed",
        "speed-up x",
        "interval",
        "checks",
        "promoted",
    ):
        table.add_column(col, overflow="fold")
    base = result.baseline["knobs"]
    for c in result.candidates:
        changed = ", ".join(f"{k}={v}" for k, v in changed_knobs(c.knobs, base).items())
        table.add_row(
            c.label,
            ", ".join(c.patches) or "-",
            changed or "-",
            f"{c.speedup:.3f}" if c.speedup else "-",
            f"[{format_ratio_bound(c.ci_low)}, {format_ratio_bound(c.ci_high)}]"
            if c.ci_low
            else "-",
            "passed" if c.verified else ("; ".join(c.reasons[:1]) or "failed"),
            "yes" if c.promoted else "no",
        )
    out.print(table)
    out.print(result.decision, markup=False, highlight=False)
    out.print(
        "written: " + ", ".join(f"{result.run_dir}/{f}" for f in result.files.values()),
        markup=False,
        highlight=False,
    )


def _verdict(m: Measurement) -> str:
    if m.valid is None:
        return ""
    return "  checks passed" if m.valid else f"  REFUSED: {m.reasons[0] if m.reasons else ''}"


@dataclass(frozen=True, kw_only=True)
class ApplyCommand:
    """``infrarsi apply`` as parsed: the run, how many candidates and rounds, the branch to
    commit a winner on, the bank and where the trials run."""

    run_dir: Path
    top: int = APPLY_TOP_K
    rounds: int | None = None
    branch: str | None = None
    bank: BankOptions = field(default_factory=BankOptions)
    executor: ExecutorOptions = field(default_factory=ExecutorOptions)
    as_json: bool = False


def apply_command(command: ApplyCommand, out: Console, err: Console) -> None:
    """Run Apply on a run directory; exit 0 with or without a promoted winner, 2 on bad input.
    What it measured goes into the experience bank (unless it is left out); its trials run
    where ``command.executor`` says."""
    run_dir, branch, as_json = command.run_dir, command.branch, command.as_json
    answer = keep_stdout_for_the_answer() if as_json else None
    screen = ApplyScreen(err if as_json else out)
    try:
        store = BankStore(command.bank.url) if command.bank.use else None
        runner = make_executor(
            command.executor.kind, Path(run_dir).resolve(), command.executor.ray_address
        )
        with holding(Path(run_dir), create=False):  # the folder's before its audit
            ledger = _ledger(Path(run_dir))
            with screen:
                result = apply_run(
                    run_dir,
                    top_k=command.top,
                    rounds=command.rounds,
                    on_event=screen.event,
                    executor=runner,
                    ledger=ledger,
                )
        if store is not None:
            added = ingest_run(Path(run_dir), store, ledger)
            err.print(
                f"bank: {added.added} experiences added to {store.url}",
                markup=False,
                highlight=False,
            )
        commit = None
        if branch is not None:
            root = load_contract(Path(result.run_dir) / "contract.yaml").manifest().root
            commit = to_branch(result, root, branch)
    except InfraRSIError as exc:
        user_error(err, exc)
    if answer is not None:
        print_answer(json.dumps(result.model_dump(mode="json")), answer)
        return
    show(result, out)
    if commit:
        out.print(f"committed the winner on branch {branch}: {commit[:12]}", markup=False)


def _ledger(run_dir: Path) -> Ledger:
    """The run's ledger, opened once for Apply and the bank, heard by the run's audit."""
    try:
        return audited(Ledger.of_run_dir(run_dir), run_dir)
    except RunDirError as exc:
        raise ApplyError(str(exc)) from None
