"""Who hears a round as it goes: the composer's callbacks, after Ray Tune's ``Callback``.

``optimize`` composes the stages and tells its callbacks three things: a stage starts
(``on_stage_start``, with the typed ``StageStarted`` event), a trial of any stage ends
(``on_trial_end``, with the trial as the round's store keeps it: what ``Store.subscribe``
calls), and the round ends (``on_round_end``, with where its ledger is). The audit writer, the
screen, the report and the bank's ingest are callbacks; none of them is called by a stage, and
each reads the round from its store, the one ledger, not from a stage's return value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from infrarsi.events import EventSink, StageStarted
from infrarsi.store import Ledger, StoredTrial


@dataclass(frozen=True)
class RoundEnd:
    """A round has run every stage: ``round`` (from 1), its run directory, its run's id in
    the round's store, and the round's ledger handle (None: a listener opens it from the run
    directory)."""

    round: int
    run_dir: Path
    run_id: str
    ledger: Ledger | None = None


class Callback:
    """A listener of a round; each hook does nothing unless a subclass says otherwise."""

    def on_stage_start(self, started: StageStarted) -> None:
        """A stage of the round begins."""

    def on_trial_end(self, trial: StoredTrial) -> None:
        """A trial of the Doctor, the search or Apply ended and is in the round's store."""

    def on_round_end(self, end: RoundEnd) -> None:
        """The round ran its stages; its ledger is complete."""


class CallbackList(Callback):
    """Several callbacks heard in the order given (the report before the bank's ingest: an
    ingest that fails leaves the report written)."""

    def __init__(self, callbacks: Sequence[Callback]) -> None:
        self.callbacks = list(callbacks)

    def on_stage_start(self, started: StageStarted) -> None:
        for callback in self.callbacks:
            callback.on_stage_start(started)

    def on_trial_end(self, trial: StoredTrial) -> None:
        for callback in self.callbacks:
            callback.on_trial_end(trial)

    def on_round_end(self, end: RoundEnd) -> None:
        for callback in self.callbacks:
            callback.on_round_end(end)


class Screen(Callback):
    """The screen as a callback: each stage's start becomes the ``StageStarted`` event the
    screens render (trials' own events come from the stages that know their context)."""

    def __init__(self, emit: EventSink) -> None:
        self.emit = emit

    def on_stage_start(self, started: StageStarted) -> None:
        self.emit(started)
