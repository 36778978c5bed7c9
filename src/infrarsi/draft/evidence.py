"""What a drafted job's trials are verified by: the parameters its framework or its optimizer
holds, saved by the harness, and where the script's own framework can judge them (a Hugging Face
``Trainer``'s evaluation, a Lightning ``Trainer.validate``) their held-out loss — the manifest's
``evaluation`` and the draft's note that says it."""

from __future__ import annotations

import re

from infrarsi.draft.draft import Draft
from infrarsi.draft.dry import DryRan
from infrarsi.draft.frameworks import (
    evaluation,
    lightning_validates,
    own_command,
    passes_eval_dataset,
)

SHARDED = r"\b(fully_shard|FullyShardedDataParallel|FSDP|deepspeed\.initialize|ZeroRedundancy\w*)\b"


def evidence(
    manifest: dict, draft: Draft, baseline: list[str], framework: str | None, ran: DryRan
) -> str:
    """The manifest's ``evaluation``, set in ``manifest``: through the script's framework, or
    (any other script whose optimizer the dry run saw step) the parameters that optimizer
    holds, saved by the harness's observer; what the draft's notes say a trial is verified by.
    ``baseline``: the draft's command rendered at its baseline."""
    if framework is None:
        start = next((r for r in ran.observed if r.get("kind") == "start"), None)
        if start is None or not ran.steps():
            return (
                "evidence: the printed loss alone (no torch.optim optimizer was seen stepping, "
                "so the harness has no parameters to save): add evaluation (final_weights, "
                "command) to check what a trial learned"
            )
        manifest["evaluation"] = {"framework": "optimizer"}
        if lightning_validates(draft.source):
            return _lightning_evidence(manifest, draft, baseline, start["optimizer"])
        sharded = re.search(SHARDED, draft.source)
        if sharded:
            return (
                f"evidence: the script shards its parameters ({sharded.group(0)}): the harness "
                "saves the parameters the optimizer holds on rank 0 — its shard, not the whole "
                "model — and compares that shard with the baseline's; a configuration that "
                "changes the sharding changes what is compared: add evaluation (final_weights "
                "and a command) for a whole-model check"
            )
        return (
            f"evidence: the harness saves the parameters the optimizer ({start['optimizer']}) "
            "holds, named by the module that owns them, before its first step and after its "
            "last in every trial, and compares them with the baseline's; no held-out loss is "
            'checked (add evaluation.command, a script that prints {"eval_loss": ...} for '
            "{weights})"
        )
    manifest["evaluation"], said = evaluation(
        framework, baseline, draft.command.script, passes_eval_dataset(draft.source)
    )
    return said


def _lightning_evidence(manifest: dict, draft: Draft, baseline: list[str], optimizer: str) -> str:
    """A Lightning job with a validation loader: the observer's weights, and the held-out loss
    of the unpatched script's own ``Trainer.validate`` at the baseline's arguments."""
    manifest["evaluation"] = {
        "framework": "lightning",
        "command": own_command(baseline, draft.command.script),
    }
    return (
        f"evidence: the harness saves the parameters the optimizer ({optimizer}) holds before "
        "its first step and after its last in every trial and compares them with the "
        "baseline's; the unpatched script's Trainer.validate judges them on its validation "
        "loader at the baseline's arguments (one process)"
    )
