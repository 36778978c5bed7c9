"""What ``optimize`` and the command line both compose, in one place: a run's ledger (its one
store, opened here and handed to every stage), the audit that hears it, and the Run stage of a
contract — its proposer of code patches (the catalog, an LLM or both) and the run loop — so
that a round of ``optimize`` and a command run by hand start the same way. Like them, this
module sits above the stages; no stage imports it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infrarsi.audit import AuditLog
from infrarsi.contract import Contract
from infrarsi.events import EventSink
from infrarsi.executors import Executor
from infrarsi.options import ProposerOptions, SearchOptions
from infrarsi.proposers import make_proposer
from infrarsi.records import DoctorReport, RunStart
from infrarsi.run.loop import RunLoop
from infrarsi.run.setup import RunError, RunSetup
from infrarsi.store import Ledger, RunStatus, Store, StoredRun, new_run_id, sqlite_url


@dataclass(frozen=True)
class Listeners:
    """Who hears the Run stage: its events, the proposer's notes, and each trial's end as the
    round's ``ledger`` (opened by the composer) tells whoever it subscribed there (None: the
    run opens its store, heard by no one)."""

    on_event: EventSink
    on_note: Callable[[str], None]
    ledger: Ledger | None = None


def search_loop(
    contract: Contract,
    run_dir: Path,
    search: SearchOptions,
    patches: ProposerOptions,
    executor: Executor,
    start: RunStart,
    listeners: Listeners,
) -> RunLoop:
    """The Run stage of ``contract`` in ``run_dir``, ready to start: the proposer
    ``patches`` names (told the Doctor's report of ``start``), and the loop searching as
    ``search`` says, from ``start``, its trials through ``executor``; ``listeners`` hear it."""
    proposer = make_proposer(
        patches.kind,
        contract,
        Path(run_dir),
        executor,
        start.doctor_report,
        patches.llm_budget,
        on_note=listeners.on_note,
    )
    setup = RunSetup.of(
        contract,
        run_dir,
        search,
        start=start,
        executor=executor,
        proposer=proposer,
        on_event=listeners.on_event,
    )
    return RunLoop(setup, listeners.ledger)


def new_ledger(
    contract: Contract, run_dir: Path, search: SearchOptions, status: RunStatus
) -> Ledger:
    """A new run's ledger in ``run_dir``: its one store (``search.store_url``, else the
    folder's SQLite file) with the run opened in it at ``status`` — made by the composer
    before any stage runs, and refused where the folder already holds a run."""
    run_dir = Path(run_dir)
    if (run_dir / "run.json").exists():
        raise RunError(
            f"{run_dir} already holds a run: resume it with --resume {run_dir}, or give "
            "another run directory"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    store = Store(search.store_url or sqlite_url(run_dir))
    name = contract.manifest().name
    run = store.save_run(StoredRun.opened(new_run_id(), contract, name, search, status))
    return Ledger(store, run.run_id)


def doctors_folder(contract: Contract, runs: Path = Path(".infrarsi") / "runs") -> Path:
    """Where a Doctor run by hand opens its ledger: the run folder ``infrarsi run`` then
    continues — the contract's (by its hash as given: the Doctor seals it anew), or where
    that holds a started run, the first of ``<hash>-2``, ``<hash>-3``, ... that does not."""
    base = Path(runs) / contract.contract_hash[:12]
    folder, n = base, 1
    while (folder / "run.json").exists():
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    return folder


def doctors_ledger(
    report: DoctorReport | None, run_dir: Path | None, store_url: str | None
) -> tuple[Path, Ledger] | None:
    """The ledger a Doctor run by hand wrote its trials to (``report.run_dir``), and its
    folder, where a new run continues it: the run not started there yet (no ``run.json``,
    its run still ``doctoring``), no other run folder (``run_dir``) nor store (``store_url``)
    asked for. None otherwise: the run opens a ledger of its own, which reads the Doctor's
    trials from their records."""
    if report is None or report.run_dir is None or report.run_id is None or store_url:
        return None
    folder = Path(report.run_dir)
    if run_dir is not None and Path(run_dir).resolve() != folder.resolve():
        return None
    if (folder / "run.json").exists() or not (folder / "run.sqlite").is_file():
        return None
    store = Store(sqlite_url(folder))
    runs = {r.run_id: r for r in store.runs()}
    run = runs.get(report.run_id)
    if run is None or run.status != RunStatus.DOCTORING:
        return None
    return folder, Ledger(store, run.run_id)


def audited(ledger: Ledger, run_dir: Path) -> Ledger:
    """``ledger`` with its run's audit (``audit.jsonl`` in ``run_dir``) caught up and
    subscribed: the one listener a command run by hand gives its store."""
    AuditLog.following(ledger, Path(run_dir))
    return ledger
