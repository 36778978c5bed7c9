"""The whole draft: read the command and the script, decide the knobs, run a few steps to read
the metrics, and put the manifest together (``draft_manifest``)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infrarsi import llm
from infrarsi.draft import observed
from infrarsi.draft.arguments import ScriptArg
from infrarsi.draft.command import CommandError, parse_command
from infrarsi.draft.draft import (
    DRY_STEPS,
    SEQ_NAMES,
    Draft,
    arguments_note,
    found_roles,
    launch_command,
    local_imports,
    option_of,
    plan,
    read_script,
    render,
    value_given,
)
from infrarsi.draft.dry import DryRan, DryRunError, dry_run
from infrarsi.draft.evidence import evidence
from infrarsi.draft.frameworks import framework_of
from infrarsi.draft.llm_metrics import ask_patterns, check_patterns
from infrarsi.draft.metrics import MetricsDraftError, read_flops, read_metrics
from infrarsi.trial.launch import SAVE_PARAMS, free_port

DryRun = Callable[[list[str], Path, float, int, dict[str, str], int | None], DryRan]
# what the hook says in a dry run (sandbox/_hooks/infrarsi_params.py WORLD_LINE)
WORLD_LINE = "infrarsi: processes training together: "
RANKS_KEPT = "ranks: the command asks for "
# a script that shards its parameters over the ranks: rank 0's optimizer holds a shard
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
    draft = _as_seen(
        draft,
        ran,
        lambda names, ranks: plan(read_script(parsed, folder, names), cores, ranks=ranks),
        named or {},
        lambda argv: run(argv, folder, timeout_s, dry_cap_bytes(parsed.nproc() or 1), {}, 2),
    )
    command = launch_command(draft)
    lines, metrics, notes = _chosen(ran, steps)
    params, invariant = _invariant(draft, metrics, lines, ran.observed)
    metrics.pop("printed", None)
    manifest = {
        "name": _workload_name(draft.command.script, draft.source, argv),
        "description": f"drafted by infrarsi manifest draft from: {' '.join(argv)}",
        "launch": {
            "command": command,
            "env": draft.env,
            "metrics": metrics,
            **({"stop_after_steps": True} if draft.stop_after_steps else {}),
        },
        "scales": _scales(params, steps, wall),
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
    baseline = render(command, draft, {**draft.params, "rdzv_port": 0})
    notes.append(evidence(manifest, draft, baseline, framework, ran))
    notes.append(arguments_note(draft))
    return Drafted(manifest, draft.notes + notes, wall)


def _scales(params: dict, steps: int, wall_s: float) -> dict:
    """``tiny`` (the dry run's steps) and ``full`` (the command's), each timed out at four
    times what the dry run took for its steps (two minutes at least)."""
    timeout = max(120.0, 4 * wall_s)
    full_timeout = max(timeout, 4 * wall_s * int(params["steps"]) / steps)
    return {
        "tiny": {
            "params": {**params, "steps": steps},
            "warmup_steps": 1,
            "timeout_s": round(timeout),
        },
        "full": {"params": params, "warmup_steps": 1, "timeout_s": round(full_timeout)},
    }


def _as_seen(
    draft: Draft,
    ran: DryRan,
    replan: Callable[[dict[str, str], bool], Draft],
    named: dict[str, str],
    again: Callable[[list[str]], DryRan],
) -> Draft:
    """The draft as the dry run showed the job: its ranks kept as given where fewer processes
    trained together than asked, the roles the run confirmed added (``replan``: the draft of
    the named roles, with or without the ranks as a knob)."""
    draft = _ranks_as_seen(draft, _world(ran.lines), lambda: replan(named, False))
    ranked = "nproc" in draft.baseline  # not where the run showed the ranks apart
    return _roles_as_run(
        draft, ran, lambda confirmed: replan({**confirmed, **named}, ranked), again
    )


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


def _roles_as_run(
    draft: Draft,
    ran: DryRan,
    replan: Callable[[dict[str, str]], Draft],
    again: Callable[[list[str]], DryRan],
) -> Draft:
    """``draft``, or where the run showed an unplaced argument's value as the micro-batch,
    the accumulation or the thread count and a second run (``again``, with each such argument
    changed) showed that quantity follow it, the draft ``replan`` makes with those roles; every
    candidate said in the notes, taken or not."""
    found = found_roles(draft)
    draft.notes.extend(observed.unseen(found, ran.observed))
    # what the draft already set (the rules', the user's, the LLM's) is not looked for again
    placed = {a.dest for a in found.values()}
    placed |= {a.dest for a in draft.args.values() if set(a.options) & draft.used}
    taken = set(found) | {k["role"] for k in draft.knobs if k["name"] != "omp_num_threads"}
    tried = observed.candidates(draft.args.values(), placed, taken, ran.observed)
    if not tried:
        return draft
    values = {**draft.params, "steps": DRY_STEPS, "rdzv_port": free_port()}
    argv = render(launch_command(draft), draft, values)
    argv += [f"{option_of(draft.args[c.dest])}={c.trial_value}" for c in tried]
    try:
        confirmed, notes = observed.followed(tried, again(argv).observed)
    except DryRunError as exc:
        draft.notes.append(
            f"{', '.join(c.dest for c in tried)}: their values were seen as "
            f"{', '.join(c.role for c in tried)} in the run, but the second dry run that would "
            f"confirm it failed ({str(exc).splitlines()[0]}): not read as roles"
        )
        return draft
    if not confirmed:
        draft.notes.extend(notes)
        return draft
    kept = _planned(replan(confirmed))
    kept.notes += [n for n in draft.notes if n.startswith(RANKS_KEPT)] + notes
    return kept


def _ranks_as_seen(draft: Draft, world: int | None, replan: Callable[[], Draft]) -> Draft:
    """``draft``, or where the dry run showed fewer processes training together than the
    ranks knob's baseline (a launcher that starts one), the draft ``replan`` makes with the
    ranks kept as given, said in its notes."""
    if "nproc" not in draft.baseline or world is None or world >= draft.baseline["nproc"]:
        return draft
    kept = _planned(replan())
    kept.notes.append(
        f"{RANKS_KEPT}{kept.command.nproc()} processes, but the framework saw "
        f"{world} training together in the dry run: kept as given, not searched"
    )
    return kept


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


def _chosen(ran: DryRan, steps: int):
    """(lines, ``launch.metrics``, notes): the steps as the training ran them, where the
    observer saw each optimizer step with its loss (the printed lines then a cross-check, and
    where their patterns read them, the way to read the lines instead); else the printed
    lines', read as ``_metrics`` reads them."""
    _finite(ran)
    counted = observed_steps(ran.steps(), steps)
    try:  # an LLM is asked for patterns only where the observer cannot stand in for them
        lines, printed, notes = _metrics(ran.lines, steps, use_llm=isinstance(counted, str))
    except MetricsDraftError as unread:
        if isinstance(counted, str):
            raise MetricsDraftError(f"{unread}; and {counted}") from None
        said = f"the printed lines are not read ({str(unread).split(';')[0]})"
        return [], counted, [_observed_note(ran, counted, said)]
    if isinstance(counted, str):
        return lines, printed, [*notes, f"steps: read from the printed lines, since {counted}"]
    agree = printed.get("steps_offset", 0) == counted.get("steps_offset", 0)
    said = (
        "the printed lines agree (one loss line a step)"
        if agree
        else f"the printed loss lines count {steps + printed.get('steps_offset', 0)} steps"
    )
    shown = {k: v for k, v in printed.items() if k != "tokens_per_step"}
    said += f"; to read the lines instead, set launch.metrics to {json.dumps(shown)}"
    return lines, {**counted, "printed": printed}, [_observed_note(ran, counted, said)]


NAN_LINE = re.compile(r"(?i)\bloss\b[^\n]{0,20}?\b(nan|inf)\b")


def _finite(ran: DryRan) -> None:
    """MetricsDraftError when the dry run's loss was not a number: the training diverged (at
    the step the observer saw it, or on the line that printed it), not a print format."""
    for s in ran.steps():
        loss = s.get("loss")
        if isinstance(loss, float) and not math.isfinite(loss):
            raise MetricsDraftError(
                f"the loss was {loss} at optimizer step {s['step']} of the dry run: the "
                "training diverges at these settings (a learning rate too high, bad inputs, "
                "an overflow): fix the run, then draft it"
            )
    shown = next((text for _, text, _ in ran.lines if NAN_LINE.search(text)), None)
    if shown is not None and not ran.steps():
        raise MetricsDraftError(
            f"the dry run printed a loss that is not a number ({shown.strip()[:80]!r}): the "
            "training diverges at these settings: fix the run, then draft it"
        )


def observed_steps(seen: list[dict], steps: int) -> dict | str:
    """``launch.metrics`` read from the observer (``{"observed": "optimizer"}``, with the one
    step more a loop over ``range(steps + 1)`` takes), or why the observed steps cannot be
    the trial's (no optimizer seen, a step without a scalar loss, a count that is not the
    steps asked)."""
    if not seen:
        return "no torch.optim optimizer was seen stepping"
    lost = next((s["step"] for s in seen if s.get("loss") is None), None)
    if lost is not None:
        return f"optimizer step {lost} had no scalar loss reach backward"
    if len(seen) - steps not in (0, 1):
        return (
            f"the dry run asked for {steps} steps and its optimizer stepped {len(seen)} times "
            "(the step argument counts something else)"
        )
    offset = len(seen) - steps
    return {"observed": "optimizer", **({"steps_offset": offset} if offset else {})}


def _observed_note(ran: DryRan, metrics: dict, printed: str) -> str:
    seen = ran.steps()
    backwards = sorted({int(s.get("backwards", 0)) for s in seen})
    skipped = sum(bool(s.get("skipped")) for s in seen)
    return (
        f"steps: read from the training itself — {len(seen)} optimizer steps, each with the "
        f"loss that reached backward and {'/'.join(map(str, backwards))} backward call(s), "
        "reported on the harness's channel and timed by its clock"
        + (f" ({skipped} skipped by a gradient scaler)" if skipped else "")
        + (
            " (the loop takes one step more than it is given)"
            if metrics.get("steps_offset")
            else ""
        )
        + f"; {printed}"
    )


def _metrics(printed: list[tuple[float, str, str]], steps: int, ask=None, use_llm: bool = True):
    """(the lines the metrics are read from, ``launch.metrics``, notes): by the rules from
    standard output, else — a script that logs with Python's logging — from standard error
    too; else, with an LLM endpoint set, by the LLM's patterns, checked the same way."""
    stdout = [(t, text) for t, text, stream in printed if stream == "stdout"]
    both = [(t, text) for t, text, _ in printed]
    attempts = ((stdout, False), (both, True))
    try:
        return _first(attempts, lambda lines: read_metrics(lines, steps))
    except MetricsDraftError as rules:
        if not use_llm or (ask is None and not llm.configured()):
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


def _sequence_as_run(draft: Draft, seen: list[dict]) -> ScriptArg | None:
    """The one integer argument whose value is the length of the token rows the model's first
    forward was given (the sequence length, whatever it is called), said in the notes."""
    lengths = {r["value"] for r in seen if r.get("what") == "forward.tokens"}
    values = observed.parsed_values(seen)
    same = [
        a
        for a in draft.args.values()
        if values.get(a.dest) in lengths and a.type == "int" and not set(a.options) & draft.used
    ]
    if len(same) != 1:
        return None
    draft.notes.append(
        f"{same[0].dest}: the sequence length, from the run (the model's first forward was "
        f"given rows of {values[same[0].dest]} token ids): tokens per step counted with it"
    )
    return same[0]


def _invariant(draft: Draft, metrics: dict, lines, seen: list[dict]) -> tuple[dict, str]:
    """The scale parameters and the invariant (tokens per optimizer step): the number the
    script printed, else the global batch times the sequence length argument, else the
    global batch in sequences (said in a note)."""
    params = dict(draft.params)
    pattern = metrics.get("tokens_per_step") or metrics.get("printed", {}).get("tokens_per_step")
    if pattern:
        found = re.findall(pattern, "\n".join(line for _, line in lines))
        params["tokens_per_step"] = int(found[0].replace(",", ""))
        return params, "tokens_per_step"
    seq = next((a for a in draft.args.values() if re.search(SEQ_NAMES, a.dest.lower())), None)
    seq = seq or _sequence_as_run(draft, seen)
    batch = draft.global_batch or " * ".join(
        k["name"] for k in draft.knobs if k["name"] in ("micro_batch", "grad_accum", "nproc")
    )
    if seq is not None and isinstance(value_given(draft, seq), int):
        params["seq_len"] = value_given(draft, seq)
        draft.sequence = seq.dest
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
