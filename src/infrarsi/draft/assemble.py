"""The whole draft: read the command and the script, decide the knobs, run a few steps to read
the metrics, and put the manifest together (``draft_manifest``)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infrarsi import llm
from infrarsi.draft.command import CommandError, parse_command
from infrarsi.draft.draft import (
    DRY_STEPS,
    SEQ_NAMES,
    Draft,
    launch_command,
    local_imports,
    plan,
    read_script,
    render,
    value_given,
)
from infrarsi.draft.dry import DryRan, dry_run
from infrarsi.draft.frameworks import evaluation, framework_of, passes_eval_dataset
from infrarsi.draft.llm_metrics import ask_patterns, check_patterns
from infrarsi.draft.metrics import MetricsDraftError, read_flops, read_metrics
from infrarsi.trial.launch import SAVE_PARAMS, free_port

DryRun = Callable[[list[str], Path, float, int, dict[str, str], int | None], DryRan]
# what the hook says in a dry run (sandbox/_hooks/infrarsi_params.py WORLD_LINE)
WORLD_LINE = "infrarsi: processes training together: "
DRY_MEMORY_SHARE = 0.5  # of the host's memory, shared by the dry run's ranks
DATA_FILES = r"(^|_)(data|dataset|datasets|dataloader|prepare)\.py$"
# the loss drift two runs may show, point-wise per step (the bundled workloads' fp32 and bf16
# tolerances); the Doctor measures this job's own noise floor and tightens what it verifies
LOSS_RTOL = 1.0e-4
LOSS_RTOL_BF16 = 2.0e-2


@dataclass(frozen=True)
class Drafted:
    """A drafted manifest (a dict ``load_manifest`` validates) and what the user should know:
    what was guessed, what was left out."""

    manifest: dict
    notes: list[str]
    dry_run_s: float


def draft_manifest(
    argv: list[str],
    folder: Path,
    cores: int,
    timeout_s: float = 120.0,
    run: DryRun = dry_run,
    named: dict[str, str] | None = None,
) -> Drafted:
    """The manifest of the training job ``argv`` runs from ``folder`` (see the package);
    ``named``: the roles the user named (an argument's name or option -> its role)."""
    folder = Path(folder).resolve()
    parsed = parse_command(argv)
    draft = _planned(plan(read_script(parsed, folder, named), cores))
    framework = framework_of(draft.source)
    steps = min(DRY_STEPS, int(draft.params["steps"]))
    ran = _dry(draft, framework, folder, steps, timeout_s, run)
    printed, wall = ran.lines, ran.wall_s
    draft = _ranks_as_seen(
        draft,
        _world(printed),
        lambda: plan(read_script(parsed, folder, named), cores, ranks=False),
    )
    command = launch_command(draft)
    lines, metrics, notes = _metrics(printed, steps)
    params, invariant = _invariant(draft, metrics, lines)
    timeout = max(120.0, 4 * wall)
    full_timeout = max(timeout, 4 * wall * int(draft.params["steps"]) / steps)
    manifest = {
        "name": _workload_name(draft.command.script, draft.source, argv),
        "description": f"drafted by infrarsi manifest draft from: {' '.join(argv)}",
        "launch": {
            "command": command,
            "env": draft.env,
            "metrics": metrics,
            **({"stop_after_steps": True} if draft.stop_after_steps else {}),
        },
        "scales": {
            "tiny": {
                "params": {**params, "steps": steps},
                "warmup_steps": 1,
                "timeout_s": round(timeout),
            },
            "full": {"params": params, "warmup_steps": 1, "timeout_s": round(full_timeout)},
        },
        "knobs": draft.knobs,
        "constraints": draft.constraints,
        "invariants": {
            "tokens_per_step": invariant,
            "loss_rtol": LOSS_RTOL,
            "loss_rtol_bf16": LOSS_RTOL_BF16,
        },
        "files": _files(folder / draft.command.script),
    }
    flops, flops_note = read_flops([(t, text) for t, text, _ in printed])  # either stream
    notes.append(flops_note)
    if flops is not None:
        manifest["flops"] = flops
    notes.append(_evidence(manifest, draft, command, framework, ran))
    return Drafted(manifest, draft.notes + notes, wall)


def _dry(
    draft: Draft, framework: str | None, folder: Path, steps: int, timeout_s: float, run: DryRun
) -> DryRan:
    """The dry run of ``steps`` steps at the draft's baseline, the framework's hook asked to
    say how many processes train together, a script without a step count stopped at the
    optimizer's ``steps``-th step (CommandError where its optimizer was not seen stepping)."""
    values = {**draft.params, "steps": steps, "rdzv_port": free_port()}
    argv = render(launch_command(draft), draft, values)
    said = {SAVE_PARAMS: framework, "INFRARSI_SAY_WORLD": "1"} if framework else {}
    cap = dry_cap_bytes(draft.command.nproc() or 1)
    ran = run(argv, folder, timeout_s, cap, said, steps if draft.stop_after_steps else None)
    _stopped_as_asked(draft, ran, steps)
    return ran


def _stopped_as_asked(draft: Draft, ran: DryRan, steps: int) -> None:
    """A script that takes no step count can be run a fixed number of steps only where the
    observer saw its optimizer step: CommandError otherwise."""
    if not draft.stop_after_steps or len(ran.steps()) >= steps:
        return
    raise CommandError(
        "no argument sets the number of optimizer steps, and the dry run showed "
        f"{len(ran.steps())} step(s) of a torch.optim optimizer where the harness stops a run "
        f"at {steps}: give the step count on the command (its argument named with "
        "--role NAME=steps), or train with a torch.optim optimizer"
    )


def _ranks_as_seen(draft: Draft, world: int | None, replan: Callable[[], Draft]) -> Draft:
    """``draft``, or where the dry run showed fewer processes training together than the
    ranks knob's baseline (a launcher that starts one), the draft ``replan`` makes with the
    ranks kept as given, said in its notes."""
    if "nproc" not in draft.baseline or world is None or world >= draft.baseline["nproc"]:
        return draft
    kept = _planned(replan())
    kept.notes.append(
        f"ranks: the command asks for {kept.command.nproc()} processes, but the framework saw "
        f"{world} training together in the dry run: kept as given, not searched"
    )
    return kept


def _evidence(
    manifest: dict, draft: Draft, command: list[str], framework: str | None, ran: DryRan
) -> str:
    """The manifest's ``evaluation``, set in ``manifest``: through the script's framework, or
    (any other script whose optimizer the dry run saw step) the parameters that optimizer
    holds, saved by the harness's observer; what the draft's notes say a trial is verified by."""
    if framework is None:
        start = next((r for r in ran.observed if r.get("kind") == "start"), None)
        if start is None or not ran.steps():
            return (
                "evidence: the printed loss alone (no torch.optim optimizer was seen stepping, "
                "so the harness has no parameters to save): add evaluation (final_weights, "
                "command) to check what a trial learned"
            )
        manifest["evaluation"] = {"framework": "optimizer"}
        return (
            f"evidence: the harness saves the parameters the optimizer ({start['optimizer']}) "
            "holds, named by the module that owns them, before its first step and after its "
            "last in every trial, and compares them with the baseline's; no held-out loss is "
            'checked (add evaluation.command, a script that prints {"eval_loss": ...} for '
            "{weights})"
        )
    baseline = render(command, draft, {**draft.params, "rdzv_port": 0})
    manifest["evaluation"], said = evaluation(
        framework, baseline, draft.command.script, passes_eval_dataset(draft.source)
    )
    return said


def _planned(draft: Draft) -> Draft:
    """``draft``, or CommandError when no argument has a role a search can use."""
    if not draft.knobs:
        raise CommandError(
            "no argument of the script has a role a search can use (batch size with "
            "accumulation, threads, precision, compile, checkpointing ...): nothing to tune"
        )
    return draft


def _world(printed: list[tuple[float, str, str]]) -> int | None:
    """How many processes trained together in the dry run, as the framework's hook said."""
    for _, text, _ in printed:
        if text.startswith(WORLD_LINE):
            return int(text[len(WORLD_LINE) :].strip())
    return None


def _metrics(printed: list[tuple[float, str, str]], steps: int, ask=None):
    """(the lines the metrics are read from, ``launch.metrics``, notes): by the rules from
    standard output, else — a script that logs with Python's logging — from standard error
    too; else, with an LLM endpoint set, by the LLM's patterns, checked the same way."""
    stdout = [(t, text) for t, text, stream in printed if stream == "stdout"]
    both = [(t, text) for t, text, _ in printed]
    attempts = ((stdout, False), (both, True))
    try:
        return _first(attempts, lambda lines: read_metrics(lines, steps))
    except MetricsDraftError as rules:
        if ask is None and not llm.configured():
            raise
        try:
            answer = ask_patterns(both, steps, ask or llm.complete)
            return _first(attempts, lambda lines: check_patterns(answer, lines, steps), -1)
        except MetricsDraftError as drafted:
            raise MetricsDraftError(f"{rules}; {drafted}") from None


def _first(attempts, read, which: int = 0):
    """The first of ``attempts`` (lines, from standard error too) that ``read`` reads, as
    ``_read`` returns it; when none does, the MetricsDraftError of attempt ``which``."""
    errors = []
    for lines, stderr in attempts:
        try:
            return _read(lines, stderr, *read(lines))
        except MetricsDraftError as exc:
            errors.append(exc)
    raise errors[which]


def _read(lines, stderr: bool, metrics: dict, notes: list[str]):
    if stderr:
        metrics["read_stderr"] = True
        notes = [
            "the step lines are on standard error (Python's logging writes there): read there too",
            *notes,
        ]
    return lines, metrics, notes


def dry_cap_bytes(ranks: int) -> int:
    """Each rank's memory cap in the dry run: half the host's memory shared by its ranks (a
    script that would take the machine ends there, as a capped trial would)."""
    import psutil

    return int(psutil.virtual_memory().total * DRY_MEMORY_SHARE) // max(1, ranks)


def _invariant(draft: Draft, metrics: dict, lines) -> tuple[dict, str]:
    """The scale parameters and the invariant (tokens per optimizer step): the number the
    script printed, else the global batch times the sequence length argument, else the
    global batch in sequences (said in a note)."""
    params = dict(draft.params)
    pattern = metrics.get("tokens_per_step")
    if pattern:
        found = re.findall(pattern, "\n".join(line for _, line in lines))
        params["tokens_per_step"] = int(found[0].replace(",", ""))
        return params, "tokens_per_step"
    seq = next((a for a in draft.args.values() if re.search(SEQ_NAMES, a.dest.lower())), None)
    batch = draft.global_batch or " * ".join(
        k["name"] for k in draft.knobs if k["name"] in ("micro_batch", "grad_accum", "nproc")
    )
    if seq is not None and isinstance(value_given(draft, seq), int):
        params["seq_len"] = value_given(draft, seq)
        return params, f"{batch} * seq_len" if batch else "seq_len"
    draft.notes.append(
        "tokens per step: the script prints none and no sequence-length argument was found: "
        "counted in sequences of the global batch (tokens_per_s is then sequences per second)"
    )
    return params, batch or "1"


def _files(script: Path) -> dict:
    """Editable: the modules the script imports from its folder, but its data code; locked:
    the script itself and its data code."""
    imports = local_imports(script)
    data = [f for f in imports if re.search(DATA_FILES, f)]
    return {"editable": [f for f in imports if f not in data], "locked": [script.name, *data]}


def _workload_name(script: str, source: str, argv: list[str]) -> str:
    """The script's name and a signature of its content and command (``train-1a2b3c4d``): one
    user's scripts that share a file name are other workloads in runs and in the bank."""
    stem = Path(script).stem.lower()
    name = re.sub(r"[^a-z0-9]+", "-", stem).strip("-") or "workload"
    signed = hashlib.sha256("\0".join([source, *argv]).encode()).hexdigest()[:8]
    return f"{name}-{signed}"
