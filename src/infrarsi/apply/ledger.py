"""Apply's ledger: each trial Apply runs goes into the run's store as it ends, with what Apply
concluded of it — a round's measurement (its config and verdict) or a reference run — in one
write, so a killed Apply loses nothing and a resumed one reads back, from the same store, what
it had finished. The store is the one ledger of every stage's trials: no side journal."""

from __future__ import annotations

from typing import Any

from infrarsi.records.trial import TrialRecord
from infrarsi.stages import Stage
from infrarsi.store import Store


class ApplyLedger:
    """The Apply trials of one stored run, read and written through the run's store."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store, self.run_id = store, run_id

    def entries(self) -> list[tuple[dict[str, Any], TrialRecord | None]]:
        """What an earlier Apply of this run concluded, trial by trial in the order they ran:
        (verdict, record) of each Apply trial stored with a verdict."""
        return [
            (t.verdict, t.record)
            for t in self.store.trials(self.run_id, Stage.APPLY)
            if t.verdict is not None
        ]

    def add(self, record: TrialRecord, label: str, verdict: dict[str, Any]) -> None:
        """Store one finished Apply trial with its label and verdict (once per trial id)."""
        self.store.add_trial(self.run_id, Stage.APPLY, record, label=label, verdict=verdict)
