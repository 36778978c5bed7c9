"""What ``optimize`` and the command line both compose, in one place: the Run stage of a
contract — its proposer of code patches (the catalog, an LLM or both) and the run loop — so
that a round of ``optimize`` and ``infrarsi run`` start a search the same way. Like them, this
module sits above the stages; no stage imports it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infrarsi.contract import Contract
from infrarsi.events import EventSink
from infrarsi.executors import Executor
from infrarsi.options import ProposerOptions, SearchOptions
from infrarsi.proposers import make_proposer
from infrarsi.records import RunStart
from infrarsi.run.loop import RunLoop
from infrarsi.store import Ledger


@dataclass(frozen=True)
class Listeners:
    """Who hears the Run stage: its events, the proposer's notes, and each trial's end as the
    round's ``ledger`` (opened by the composer) tells whoever it subscribed there (None: the
    run opens its store, heard by the run's audit log alone)."""

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
    return RunLoop(
        contract,
        run_dir,
        search,
        start=start,
        executor=executor,
        proposer=proposer,
        on_event=listeners.on_event,
        ledger=listeners.ledger,
    )
