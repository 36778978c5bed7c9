"""The audit trail, ``audit.jsonl`` in a run's folder: one JSON object per trial of every stage
(the Doctor's, the search's, Apply's), its record as the store keeps it with its stage's
context. It is an export of the store, written line by line as each trial ends (``AuditLog``,
subscribed to the run's store) and never rewritten: an Apply trial is stored with its verdict,
so its line is whole when it is written, and a run killed at any point keeps the lines of every
trial that ended. A run whose store holds trials its file lacks (made before trials were
audited as they ended) has them appended once when it is opened again (``AuditLog.catch_up``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infrarsi.callbacks import Callback
from infrarsi.objective import ranked_step_time_s
from infrarsi.proposal import proposed_by, who_proposed
from infrarsi.records import AUDIT_FILE, Measurement
from infrarsi.stages import Stage
from infrarsi.store import Ledger, StoredTrial
from infrarsi.trial import TrialRecord

# what an Apply trial's line adds of the measurement it was stored with
VERDICT_FIELDS = {"round", "label", "compared_s", "valid", "reasons", "flags"}


def audit_row(record: TrialRecord | None, objective: str, **context: Any) -> dict[str, Any]:
    """One audit row: the trial's record as the store keeps it, serialised, with the context
    its stage adds (``stage``, who proposed it, the predictions, Apply's verdict) and the two
    figures a reader looks for first: the patch ids with their sha256, and what the search
    ranks by (``ranked_time_per_step_s``, the objective's time per step)."""
    row = record.model_dump(mode="json") if record is not None else {}
    refs = record.patches if record is not None else []
    row["patch_ids"] = [ref.id for ref in refs]
    row["patch_sha256"] = {ref.id: ref.sha256 for ref in refs}
    row["ranked_time_per_step_s"] = ranked_step_time_s(record, objective) if record else None
    row.update({k: v for k, v in context.items() if v is not None or k not in row})
    return row


def audit_line(
    t: StoredTrial,
    objective: str,
    searcher: str,
    writers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One trial's audit row: its record with its stage's context (``searcher``: the run's,
    which chose its search trials; an Apply trial's verdict as it was stored with it).
    ``writers``: proposed patch id -> who wrote it ('llm:<model>'); a trial carrying such a
    patch is ``proposed_by`` that writer (then the searcher that chose the config)."""
    writers = dict(writers or {})
    context: dict[str, Any] = {
        "stage": t.stage.value,
        "label": t.label,
        "seq": t.seq,
        "trial_id": t.trial_id,
        "knobs": t.config_json["knobs"],
        "status": t.status.value,
        "cost_s": t.cost_s,
        "error": t.error,
    }
    if t.stage is Stage.RUN:
        context["proposed_by"] = t.proposed_by or who_proposed(
            t.config_json["patches"], writers, searcher
        )
        context["predicted"] = t.predicted.model_dump()
    elif t.stage is Stage.APPLY:
        context["proposed_by"] = t.proposed_by or who_proposed(
            t.config_json["patches"], writers, None
        )
        m = Measurement.of_verdict(t.verdict)
        if m is not None:
            context.update(m.model_dump(mode="json", include=VERDICT_FIELDS))
    return audit_row(t.record, objective, **context)


# what tells one audit line's trial from another's: its stage, sequence number and trial id
KEY_FIELDS = ("stage", "seq", "trial_id")


def _audit_key(line: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(line.get(k) for k in KEY_FIELDS)


class AuditLog(Callback):
    """Appends a trial's audit line to ``run_dir``'s ``audit.jsonl`` as the store finishes it:
    the callback a run's store calls (``Store.subscribe(log.on_trial_end)``) for every trial
    that ends."""

    def __init__(self, run_dir: Path, objective: str, searcher: str) -> None:
        self.run_dir, self.objective, self.searcher = Path(run_dir), objective, searcher

    @classmethod
    def following(cls, ledger: Ledger, run_dir: Path) -> AuditLog:
        """The audit of ``ledger``'s run in ``run_dir``, caught up with what the store holds
        and subscribed to it: what a command run by hand, as its round's composer, hears."""
        run = ledger.run
        log = cls(run_dir, run.contract.objective, run.searcher)
        log.catch_up(ledger.store.trials(run.run_id, None))
        ledger.store.subscribe(log.on_trial_end)
        return log

    def on_trial_end(self, trial: StoredTrial) -> None:
        self._append([trial])

    def catch_up(self, trials: list[StoredTrial]) -> int:
        """Append the lines of the finished ``trials`` the file lacks (a run made before its
        trials were audited as they ended); returns how many were written."""
        path = self.run_dir / AUDIT_FILE
        text = path.read_text() if path.is_file() else ""
        have = {_audit_key(json.loads(line)) for line in text.splitlines() if line.strip()}
        missing = [
            t
            for t in trials
            if t.status.is_finished()
            and _audit_key({"stage": t.stage.value, "seq": t.seq, "trial_id": t.trial_id})
            not in have
        ]
        self._append(missing)
        return len(missing)

    def _append(self, trials: list[StoredTrial]) -> None:
        if not trials:
            return
        writers = proposed_by(self.run_dir)
        with open(self.run_dir / AUDIT_FILE, "a") as out:
            for trial in trials:
                line = audit_line(trial, self.objective, self.searcher, writers=writers)
                out.write(json.dumps(line, default=str) + "\n")
