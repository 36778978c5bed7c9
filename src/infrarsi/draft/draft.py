"""A manifest drafted from the command a user runs today and from their script: the knobs
(arguments with a recognised role, and ``torchrun``'s ranks), the step count and the seed as
scale parameters, the invariant, the stdout patterns from a dry run, the files — as a dict a
``Manifest`` validates, and notes that say what was guessed and what was left out."""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from infrarsi import llm
from infrarsi.draft import roles
from infrarsi.draft.arguments import ScriptArg, read_arguments
from infrarsi.draft.command import NPROC_OPTIONS, Command, CommandError
from infrarsi.draft.llm_roles import guess_roles
from infrarsi.draft.usage import PARAMETERS, roles_by_use

RoleAsker = Callable[[str, str], str]  # (system, user) -> the LLM's reply

DRY_STEPS = 6  # the steps of the dry run and of the drafted ``tiny`` scale
STOPPED_STEPS = 60  # the ``full`` scale of a script that takes no step count (the harness stops it)
SEQ_NAMES = (
    r"^(block_size|seq_len|seq_length|max_seq_length|context_length|sequence_length|block|seq"
    r"|seqlen|max_length)$"
)


@dataclass
class Draft:
    """What is being drafted: the command, the script's arguments, and what is decided."""

    command: Command
    args: dict[str, ScriptArg]
    source: str = ""
    knobs: list[dict] = field(default_factory=list)
    template: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    constraints: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    used: set[str] = field(default_factory=set)  # the script's options the draft sets
    baseline: dict[str, Any] = field(default_factory=dict)  # every knob's baseline value
    global_batch: str = ""  # the knobs' product that is the global batch, in sequences
    env: dict[str, str] = field(default_factory=dict)  # the launch's environment templates
    stop_after_steps: bool = False  # no step argument: the harness stops it after ``steps``
    sequence: str = ""  # the argument read as the sequence length (tokens per step), if any


def read_script(command: Command, folder: Path, named: dict[str, str] | None = None) -> Draft:
    """The script's declared arguments, with the roles the user named (``named``: an
    argument's name or option -> its role; CommandError for a name the script does not declare
    or a role there is not), CommandError when the script is not in ``folder``."""
    path = Path(folder) / command.script
    if not path.is_file():
        raise CommandError(f"{command.script}: no such file in {folder} (run from its folder)")
    source = path.read_text()
    args = {a.dest: a for a in read_arguments(source)}
    for name, role in (named or {}).items():
        arg = _declared(args, name)
        if role not in roles.NAMEABLE:
            raise CommandError(
                f"--role {name}={role}: no such role; name one of {', '.join(roles.NAMEABLE)} "
                "(the ranks come from the launcher: torchrun --nproc-per-node, accelerate "
                "launch --num_processes)"
            )
        if role in roles.TYPE_NEEDED and not roles.type_fits(role, arg):
            raise CommandError(
                f"--role {name}={role}: {arg.dest} is declared {arg.type or 'untyped'}, and "
                f"{role} needs {roles.TYPE_NEEDED[role]}"
            )
        args[arg.dest] = replace(arg, named=role)
    return Draft(command, args, source)


def _declared(args: dict[str, ScriptArg], name: str) -> ScriptArg:
    """The argument ``name`` names (its destination, or one of its options)."""
    dest = name.lstrip("-").replace("-", "_")
    for arg in args.values():
        if arg.dest == dest or name in arg.options:
            return arg
    known = ", ".join(sorted(a.options[0] if a.options else a.dest for a in args.values()))
    raise CommandError(
        f"--role {name}: the script declares no such argument (it declares: {known or 'none'})"
    )


def value_given(draft: Draft, arg: ScriptArg) -> Any:
    """The argument's value in the user's command (typed like its default), else its default;
    a switch is True when given."""
    for g in draft.command.given:
        if g.option in arg.options:
            if arg.switch:
                return True
            return _typed(g.value, arg.type)
    return arg.default


def _typed(text: str | None, kind: str | None) -> Any:
    if text is None:
        return None
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        return text
    if kind == "bool":
        return text.lower() in ("1", "true", "yes", "on")
    return text


def plan(draft: Draft, cores: int, ask: RoleAsker | None = None, ranks: bool = True) -> Draft:
    """Decide the knobs, the scale parameters, the constraint and the launch template.
    ``ask``: an LLM that places the arguments the rules cannot (by default the configured
    endpoint, when one is set); ``ranks``: the launcher's ranks a knob (False: kept as given,
    where they were seen not to train together)."""
    by_role = _by_role(draft)
    if ask is not None or llm.configured():
        _llm_roles(draft, by_role, ask or llm.complete)
    nproc = draft.command.nproc() if ranks else None
    if draft.command.launcher == "accelerate" and ranks:  # one process unless told
        nproc = nproc or 1
    _batch(draft, by_role, nproc, cores)
    _multi_process_switch(draft)
    for role in ("threads", "data"):
        if role in by_role:
            arg = by_role[role]
            top = cores if role == "threads" else min(4, cores)
            # a script may hand its thread count to torch.set_num_threads, which refuses 0:
            # threads start at 1, 0 only where the script ran with it (its own guard then)
            given = value_given(draft, arg)
            low = 1 if role == "threads" and given != 0 else 0
            values = {*range(low, top + 1), *([given] if isinstance(given, int) else [])}
            _knob(draft, arg, role, sorted(values))
    if "threads" not in by_role:
        _omp_threads(draft, cores)
    for role in ("precision", "compile", "activation_checkpointing", "attention", "optimizer"):
        if role in by_role:
            _choice_knob(draft, by_role[role], role)
    _fixed(draft)
    _framework_env(draft)
    return draft


def _by_role(draft: Draft) -> dict[str, ScriptArg]:
    """The arguments placed in a role by their name or help text, then by how the script uses
    them (each of the latter said in the notes)."""
    by_role: dict[str, ScriptArg] = {}
    for arg in draft.args.values():
        role = roles.role_of(arg)
        if role is not None and role not in by_role:
            by_role[role] = arg
    _roles_by_use(draft, by_role)
    return by_role


def found_roles(draft: Draft) -> dict[str, ScriptArg]:
    """The roles the rules read for ``draft``'s arguments (names, help, use), nothing noted."""
    return _by_role(replace(draft, notes=[]))


FRAMEWORK_ENV = ("ACCELERATE_",)  # a framework's settings read from the environment


def _framework_env(draft: Draft) -> None:
    """The framework settings the command ran with from its environment (accelerate's
    ``ACCELERATE_USE_CPU=1`` makes its CPU world): kept in the launch, since a trial runs in
    the environment of whoever runs ``optimize``, not the user's shell of the draft."""
    kept = {
        k: v for k, v in os.environ.items() if k.startswith(FRAMEWORK_ENV) and k not in draft.env
    }
    if not kept:
        return
    draft.env.update(kept)
    said = ", ".join(f"{k}={v}" for k, v in sorted(kept.items()))
    draft.notes.append(f"environment: {said} kept from the environment the command ran in")


def _roles_by_use(draft: Draft, by_role: dict[str, ScriptArg]) -> None:
    """The roles the names left unplaced, read from how the script uses the arguments
    (``usage.roles_by_use``: what it passes to the Accelerator, a DataLoader, ...), each said
    in the draft's notes."""
    placed = {a.dest for a in by_role.values()}
    for dest, (role, how) in roles_by_use(draft.source, set(draft.args)).items():
        arg = draft.args[dest]
        if role in PARAMETERS:
            _parameter_by_use(draft, arg, role, how)
            continue
        if role == "ranks":  # a framework's own processes, not a launcher's
            draft.notes.append(
                f"{dest}: the ranks the script's framework starts itself ({how}): kept as "
                "given — a ranks knob is the launcher's (torchrun --nproc-per-node, "
                "accelerate launch --num_processes)"
            )
            continue
        taken = role in by_role or dest in placed or roles.placed_otherwise(arg)
        if taken or not roles.type_fits(role, arg):
            continue
        by_role[role] = arg
        placed.add(dest)
        draft.notes.append(f"{dest}: {role}, from how the script uses it ({how})")


def _parameter_by_use(draft: Draft, arg: ScriptArg, role: str, how: str) -> None:
    """The step count or the seed read from where the script passes an argument (Lightning's
    ``Trainer(max_steps=...)``, ``torch.manual_seed(...)``), where no argument is read as it
    by name and the user named none."""
    test = roles.is_steps if role == "steps" else roles.is_seed
    if arg.named is not None or any(test(a) for a in draft.args.values()) or arg.type != "int":
        return
    draft.args[arg.dest] = replace(arg, named=role)
    draft.notes.append(f"{arg.dest}: the {role}, from how the script uses it ({how})")


def _llm_roles(draft: Draft, by_role: dict[str, ScriptArg], ask: RoleAsker) -> None:
    """The LLM's roles for the arguments the rules placed nowhere, when a role a search needs
    most (the batch, the accumulation) is still missing."""
    if "micro_batch" in by_role and "grad_accum" in by_role:
        return
    placed = {a.dest for a in by_role.values()}
    unplaced = [
        a for a in draft.args.values() if a.dest not in placed and not roles.placed_otherwise(a)
    ]
    found, notes = guess_roles(unplaced, set(by_role), ask)
    by_role.update(found)
    draft.notes.extend(notes)


def _omp_threads(draft: Draft, cores: int) -> None:
    """The threads knob every PyTorch job has when its script declares none: OMP_NUM_THREADS
    per process, 0 (the baseline) leaving it unset as the user's command does."""
    draft.knobs.append(
        {
            "name": "omp_num_threads",
            "role": "threads",
            "type": "int",
            "values": list(range(0, cores + 1)),
            "default": 0,
            "help": "OMP_NUM_THREADS per process; 0 leaves it unset (the launcher's default)",
        }
    )
    draft.baseline["omp_num_threads"] = 0
    draft.env["OMP_NUM_THREADS"] = "{omp_num_threads}"


MULTI_PROCESS_SWITCHES = ("--multi_gpu", "--multi-gpu")  # accelerate's: refused with one


def _multi_process_switch(draft: Draft) -> None:
    """accelerate launch's ``--multi_gpu`` where the ranks are a knob: on with two or more
    processes, off with one (accelerate refuses it there), derived from the ranks."""
    switch = next((o for o in MULTI_PROCESS_SWITCHES if o in draft.command.launcher_options), None)
    if switch is None or "nproc" not in draft.baseline:
        return
    draft.knobs.append(
        {
            "name": "multi_gpu",
            "role": "ranks",
            "type": "bool",
            "flag": switch,
            "derive": "nproc > 1",
        }
    )
    draft.baseline["multi_gpu"] = draft.baseline["nproc"] > 1


def _batch(draft: Draft, by_role: dict, nproc: int | None, cores: int) -> None:
    """Micro-batch and accumulation (and torchrun's ranks) at a fixed global batch."""
    mb, acc = by_role.get("micro_batch"), by_role.get("grad_accum")
    if nproc is not None:
        draft.knobs.append(
            {
                "name": "nproc",
                "role": "ranks",
                "type": "int",
                "values": sorted({*range(1, cores + 1), nproc}),
                "default": nproc,
            }
        )
        draft.baseline["nproc"] = nproc
    if mb is None or acc is None:
        _one_of_the_pair(draft, mb, acc)
        return
    mb0, acc0 = value_given(draft, mb), value_given(draft, acc)
    if not isinstance(mb0, int) or not isinstance(acc0, int) or mb0 < 1 or acc0 < 1:
        draft.notes.append(f"{mb.dest}, {acc.dest}: no integer baseline values: kept as given")
        return
    # nanoGPT's convention: the accumulation given is the whole job's, divided by the world
    # size in the script; else (Hugging Face's, most scripts') it is per rank
    divides = re.search(rf"\b{re.escape(acc.dest)}\s*//=\s*\w*world", draft.source) is not None
    world = " * nproc" if nproc is not None and not divides else ""
    total = mb0 * acc0 * (nproc if world and nproc else 1)
    ranks = _ranks(draft) if world else [1]
    # micro-batch m, accumulation a and ranks n with m * a * n == total (n = 1: the script's
    # own convention already takes the ranks out)
    mbs = [m for m in range(1, total + 1) if any(total % (m * n) == 0 for n in ranks)]
    _knob(draft, mb, "micro_batch", mbs, name="micro_batch")
    accs = sorted({total // (m * n) for m in mbs for n in ranks if total % (m * n) == 0})
    draft.knobs.append(
        {
            "name": "grad_accum",
            "role": "grad_accum",
            "type": "int",
            "values": accs,
            "derive": f"{total} // (micro_batch{world})",
        }
    )
    draft.template += [f"{option_of(acc)}={{grad_accum}}"]
    draft.global_batch = f"micro_batch * grad_accum{world}"
    draft.used |= set(acc.options)
    draft.baseline["grad_accum"] = acc0
    draft.constraints.append(
        {
            "expr": f"micro_batch * grad_accum{world} == {total}",
            "why": f"the global batch of the baseline ({total} sequences) is fixed",
        }
    )
    if divides and nproc is not None:
        draft.constraints.append(
            {"expr": "grad_accum % nproc == 0", "why": "the script divides it by the ranks"}
        )
    _accumulation_note(draft, acc.dest, divides, total, per_rank=bool(world))


def _one_of_the_pair(draft: Draft, mb, acc) -> None:
    """A micro-batch without an accumulation (or the other way round): kept as given, since
    changing it alone would change the global batch; the notes say which."""
    if mb is not None:
        draft.notes.append(
            f"{mb.dest}: no accumulation argument was found, so a micro-batch change would "
            "change the global batch: kept as given"
        )
    elif acc is not None:
        draft.notes.append(
            f"{acc.dest}: no micro-batch argument was found, so an accumulation change "
            "would change the global batch: kept as given"
        )


def _accumulation_note(draft: Draft, dest: str, divides: bool, total: int, per_rank: bool) -> None:
    """How the accumulation was read (the job's total or per rank), for the person to check."""
    how = (
        f"the job's total, which the script divides by the ranks ({dest} //= world size)"
        if divides
        else "per rank (the script does not divide it by the ranks)"
    )
    per = " x ranks" if per_rank else ""
    draft.notes.append(
        f"accumulation: {dest} is read as {how}; {total} // (micro-batch{per}) keeps the "
        "global batch — check it"
    )


def _ranks(draft: Draft) -> list[int]:
    for k in draft.knobs:
        if k["name"] == "nproc":
            return list(k["values"])
    return [1]


def _knob(draft: Draft, arg: ScriptArg, role: str, values: list, name: str | None = None) -> None:
    name = name or _name(arg.dest)
    draft.baseline[name] = value_given(draft, arg)
    draft.knobs.append(
        {
            "name": name,
            "role": role,
            "type": "int" if arg.type == "int" else "choice",
            "values": values,
            "default": draft.baseline[name],
        }
    )
    draft.template.append(f"{option_of(arg)}={{{name}}}")
    draft.used |= set(arg.options)


def _choice_knob(draft: Draft, arg: ScriptArg, role: str) -> None:
    """A switch or a choice: a switch as a bool knob with its flag, a choice over the values
    the parser declares (an argument without declared choices is kept as given)."""
    name, given = _name(arg.dest), value_given(draft, arg)
    draft.used |= set(arg.options)
    draft.baseline[name] = bool(given) if arg.switch else str(given)
    if arg.switch:
        draft.knobs.append(
            {
                "name": name,
                "role": role,
                "type": "bool",
                "flag": option_of(arg),
                "default": bool(given),
            }
        )
        draft.template.append(f"{{{name}}}")
    elif arg.type == "bool":  # a setting written out (--compile=False), not a switch: kept in
        # Python's spelling, which a configurator's literal_eval and Hugging Face's parser
        # read (a bool knob would be written 1 or 0)
        values = [str(bool(given)), str(not given)]
        draft.knobs.append(
            {"name": name, "role": role, "type": "choice", "values": values, "default": values[0]}
        )
        draft.baseline[name] = values[0]
        draft.template.append(f"{option_of(arg)}={{{name}}}")
    elif arg.choices or (role == "precision" and _dtype_spelling(given)):
        values = [str(c) for c in arg.choices] or _dtype_spelling(given)
        draft.knobs.append(
            {"name": name, "role": role, "type": "choice", "values": values, "default": str(given)}
        )
        draft.template.append(f"{option_of(arg)}={{{name}}}")
    else:
        draft.used -= set(arg.options)
        draft.notes.append(f"{arg.dest} ({role}): declares no choices: kept as given")


# the spellings of full and bfloat16 precision a script's dtype string is written in
DTYPE_SPELLINGS = (
    ("float32", "bfloat16"),
    ("fp32", "bf16"),
    ("32", "bf16"),
    ("no", "bf16"),
    ("32-true", "bf16-mixed"),  # PyTorch Lightning's
)


def _dtype_spelling(given: Any) -> list[str]:
    """For a precision setting that declares no choices (nanoGPT's ``dtype = 'bfloat16'``):
    full and bfloat16 precision in the spelling of the value given, the given value first;
    [] when the value is in no known spelling."""
    text = str(given).lower()
    for family in DTYPE_SPELLINGS:
        if text in family:
            return [str(given), *(v for v in family if v != text)]
    if text in ("float16", "fp16", "16"):  # fp16 given: offer bf16 in its spelling beside it
        return [str(given), "bfloat16" if text == "float16" else "bf16"]
    return []


def _fixed(draft: Draft) -> None:
    """Steps and seed as scale parameters; the logging interval at every step; every other
    argument the user gave kept as given."""
    for arg in draft.args.values():
        if roles.is_steps(arg) and "steps" not in draft.params:
            draft.params["steps"] = value_given(draft, arg)
            draft.template.append(f"{option_of(arg)}={{steps}}")
        elif roles.is_seed(arg) and "seed" not in draft.params:
            draft.params["seed"] = value_given(draft, arg)
            draft.template.append(f"{option_of(arg)}={{seed}}")
        elif roles.is_log_every(arg):
            draft.template.append(f"{option_of(arg)}=1")
        else:
            continue
        draft.used |= set(arg.options)
    if isinstance(draft.params.get("steps"), int) and draft.params["steps"] < 1:
        raise CommandError(
            f"the step count is {draft.params['steps']} (the script trains by epochs?): give "
            "the number of optimizer steps on the command (e.g. --max_steps 200)"
        )
    if "steps" not in draft.params:  # the observer ends each run after the scale's steps
        draft.params["steps"] = STOPPED_STEPS
        draft.stop_after_steps = True
        draft.notes.append(
            "steps: no argument sets the number of optimizer steps: the harness ends each run "
            "after the scale's steps, counted at the optimizer (tiny: "
            f"{DRY_STEPS}, full: {STOPPED_STEPS}; the script's own schedule otherwise: set "
            "scales.full.params.steps for more)"
        )
    for g in draft.command.given:
        if g.option is None or g.option in draft.used:
            continue
        draft.template.append(g.option if g.value is None else f"{g.option}={g.value}")


def arguments_note(draft: Draft) -> str:
    """Every argument the script declares, with what the draft made of it: a knob (its name
    and role), a scale parameter, the logging interval, or kept as given — nothing silent."""
    fields = {}
    for word in draft.template:
        option, _, value = word.partition("=")
        found = re.fullmatch(r"\{(\w+)\}", value or option)
        if found:
            fields[option if value else _flag_of(draft, found.group(1))] = found.group(1)
    roles_of = {k["name"]: k.get("role", "") for k in draft.knobs}
    said, kept = [], []
    for arg in draft.args.values():
        field = next((fields[o] for o in arg.options if o in fields), None)
        shown = option_of(arg) if arg.options else arg.dest
        if field in ("steps", "seed"):
            said.append(f"{shown}: the scale's {field}")
        elif field is not None:
            said.append(f"{shown}: knob {field} ({roles_of.get(field, 'set')})")
        elif arg.dest == draft.sequence:
            said.append(f"{shown}: the sequence length (tokens per step), kept as given")
        elif roles.is_log_every(arg) and set(arg.options) & draft.used:
            said.append(f"{shown}: 1 (every step logged)")
        else:
            kept.append(shown)
    if kept:
        said.append(
            f"{', '.join(kept)}: kept as given (no role read from the name, the help text, the "
            "use in the source or the run; name one with --role NAME=ROLE)"
        )
    return "arguments: " + "; ".join(said) if said else "arguments: the script declares none"


def _flag_of(draft: Draft, name: str) -> str:
    return next((k["flag"] for k in draft.knobs if k["name"] == name and k.get("flag")), name)


def option_of(arg: ScriptArg) -> str:
    """The option a command gives the argument by: its long form where it has one."""
    long = [o for o in arg.options if o.startswith("--")]
    return (long or list(arg.options))[0]


def _name(dest: str) -> str:
    name = re.sub(r"[^a-z0-9_]", "_", dest.lower()).strip("_")
    return name if re.match(r"^[a-z]", name) else f"k_{name}"


def local_imports(script: Path) -> list[str]:
    """The files of the script's folder the script imports (the model file, the data code)."""
    tree = ast.parse(script.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return sorted(f"{n}.py" for n in names if (script.parent / f"{n}.py").is_file())


def launch_command(draft: Draft) -> list[str]:
    """The manifest's launch template: the launcher (torchrun standalone or accelerate launch
    on one machine, with its ranks as a knob), the script, the positionals as given, then the
    options."""
    c = draft.command
    head = ["python"]
    ranked = NPROC_OPTIONS.get(c.launcher, ())
    given = next((v for k, v in c.launcher_options.items() if k in ranked), None)
    ranks = "{nproc}" if draft.baseline.get("nproc") is not None else given or "1"
    if c.launcher == "torchrun":
        keep = {
            k: v
            for k, v in c.launcher_options.items()
            if not k.startswith(("--nproc", "--rdzv", "--master", "--standalone", "--nnodes"))
        }
        head = ["torchrun", "--standalone", f"--nproc-per-node={ranks}"]
        head += [k if v is None else f"{k}={v}" for k, v in keep.items()]
    elif c.launcher == "accelerate":
        keep = {
            k: v
            for k, v in c.launcher_options.items()
            if "--" + k[2:].replace("-", "_")
            not in ("--num_processes", "--num_machines", "--machine_rank", "--main_process_port")
        }
        head = ["accelerate", "launch", f"--num_processes={ranks}", "--num_machines=1"]
        head.append("--main_process_port={rdzv_port}")  # a free port of the trial's own
        if "multi_gpu" in draft.baseline:  # follows the ranks
            keep = {k: v for k, v in keep.items() if k not in MULTI_PROCESS_SWITCHES}
            head.append("{multi_gpu}")
        head += [k if v is None else f"{k}={v}" for k, v in keep.items()]
    positionals = [g.value for g in c.given if g.option is None and g.value is not None]
    return [*head, c.script, *positionals, *draft.template]


def render(command: list[str], draft: Draft, params: dict) -> list[str]:
    """The launch template with the baseline's values and ``params`` (a bool knob with a
    flag: the flag when true, nothing when false)."""
    values = draft.baseline | dict(params)
    flags = {k["name"]: k["flag"] for k in draft.knobs if k.get("flag")}
    out = []
    for word in command:
        name = word[1:-1] if word.startswith("{") and word.endswith("}") else ""
        if name in flags:
            if values.get(name):
                out.append(flags[name])
            continue
        out.append(re.sub(r"\{(\w+)\}", lambda m: str(values.get(m.group(1))), word))
    return out
