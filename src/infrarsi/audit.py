"""The audit trail, ``audit.jsonl`` in a run's folder: one JSON object per trial of every stage
(the Doctor's, the search's, Apply's), its record as the store keeps it with its stage's
context. It is an export of the store, written as each trial ends (``AuditLog``, subscribed to
the run's store) and once more, whole, when Apply has judged its measurements
(``write_audit``): a run killed at any point keeps the lines of every trial that ended."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infrarsi.callbacks import Callback
from infrarsi.objective import ranked_step_time_s
from infrarsi.proposal import proposed_by, who_proposed
from infrarsi.records import ApplyResult, Measurement
from infrarsi.stages import Stage
from infrarsi.store import StoredRun, StoredTrial
from infrarsi.trial import TrialRecord

AUDIT_FILE = "audit.jsonl"


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


def audit_lines(
    run: StoredRun,
    trials: list[StoredTrial],
    result: ApplyResult,
    writers: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Every trial of every stage as the store keeps it — the Doctor's, the search's and
    Apply's — each its record with its stage's context: config, patch ids and hashes, status,
    metrics, cost, failure reason, who proposed it and what the models predicted, Apply's
    verdict. ``writers``: proposed patch id -> who wrote it ('llm:<model>'); a trial carrying
    such a patch is ``proposed_by`` that writer (then the searcher that chose the config)."""
    verdicts = {m.trial_id: m for m in result.measurements}
    objective = run.contract.objective
    return [audit_line(t, objective, run.searcher, verdicts, writers) for t in trials]


def audit_line(
    t: StoredTrial,
    objective: str,
    searcher: str,
    verdicts: Mapping[str, Measurement] | None = None,
    writers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One trial's audit row: its record with its stage's context (``searcher``: the run's,
    which chose its search trials; ``verdicts``: Apply's measurements by trial id, once it has
    judged them)."""
    writers, verdicts = writers or {}, verdicts or {}
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
        m = verdicts.get(t.trial_id or "")
        if m is not None:
            context.update(
                round=m.round,
                label=m.label,
                compared_s=m.compared_s,
                valid=m.valid,
                reasons=m.reasons,
                flags=m.flags,
            )
    return audit_row(t.record, objective, **context)


class AuditLog(Callback):
    """Appends a trial's audit line to ``run_dir``'s ``audit.jsonl`` as the store finishes it:
    the callback a run's store calls (``Store.subscribe(log.on_trial_end)``) for every trial
    that ends."""

    def __init__(self, run_dir: Path, objective: str, searcher: str) -> None:
        self.run_dir, self.objective, self.searcher = Path(run_dir), objective, searcher

    def on_trial_end(self, trial: StoredTrial) -> None:
        writers = proposed_by(self.run_dir)
        line = audit_line(trial, self.objective, self.searcher, writers=writers)
        with open(self.run_dir / AUDIT_FILE, "a") as out:
            out.write(json.dumps(line, default=str) + "\n")


def write_audit(path: Path, lines: list[dict[str, Any]]) -> None:
    """``audit.jsonl`` whole: one JSON object per trial, written atomically."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(line, default=str) + "\n" for line in lines))
    tmp.replace(path)
