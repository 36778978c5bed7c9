"""What a script's argument is for, guessed from its name, type and help text, the way
training scripts name them (argparse, Hugging Face ``TrainingArguments``, nanoGPT's globals):
the roles a manifest's knobs carry, the step count, the seed, the logging interval, and
arguments that are evaluation-only (never a training knob)."""

from __future__ import annotations

import re

from infrarsi.draft.arguments import ScriptArg

ROLE_NAMES: tuple[tuple[str, str], ...] = (  # (role, regex on the lower-cased name), in order
    ("grad_accum", r"grad(ient)?_?accum(ulation)?(_steps|_iters)?$|^accum(ulation)?(_steps)?$"),
    (  # per_device_train_batch_size, per_gpu_batch_size, device_batch_size, micro_bs, mbs
        "micro_batch",
        r"^(per_(device|gpu|rank)_(train_)?|device_|local_|micro_|train_)?(batch|bs)(_size)?"
        r"(_per_(device|gpu|rank))?$|^mbs$",
    ),
    ("precision", r"^(bf16|fp16|half|amp|dtype|precision|mixed_precision|use_amp)$"),
    ("compile", r"(^|_)compile$"),
    (
        "activation_checkpointing",
        r"gradient_checkpointing|activation_checkpoint(ing)?|checkpoint_activations|grad_ckpt",
    ),
    ("threads", r"^(num_)?threads(_per_rank)?$|^omp_num_threads$|^torch_threads$"),
    ("data", r"^(dataloader_)?num_workers$"),
    ("optimizer", r"^optim(izer)?$|^fused_adam(w)?$"),
    ("attention", r"^attn(_impl(ementation)?)?$|^attention(_impl(ementation)?)?$|sdpa|flash"),
)
# where the name says nothing, its help text may (``--accum``: "gradient accumulation steps")
ROLE_HELPS: tuple[tuple[str, str], ...] = (
    (
        "grad_accum",
        r"gradient accumulation|accumulat\w* (steps|micro-?batches)|"
        r"(number of )?micro-?batches (per|in an?|for each) (optimi[sz]er )?step",
    ),
    (
        "micro_batch",
        r"micro-?batch size|size of (a|each|one|the) micro-?batch|"
        r"batch size per (device|gpu|rank|process)|"
        r"per[- ](device|gpu|rank|process) (train(ing)? )?batch",
    ),
    ("threads", r"(number of|intra-op|cpu|torch) threads"),
    ("data", r"(data ?loader|data loading) (worker|process)"),
)
STEPS = r"^(max_)?(iters|steps|num_steps|train_steps|max_train_steps|iterations|num_iters)$"
SEED = r"(^|_)seed$"
LOG_EVERY = r"^(log_interval|logging_steps|log_every|print_every|log_freq|log_steps)$"
EVAL_ONLY = r"eval|valid|test|val_"


# the argument types a role needs (the others take any): a knob's values are built from them
TYPE_NEEDED = {
    "precision": "a switch or a string",
    "micro_batch": "an integer",
    "grad_accum": "an integer",
    "threads": "an integer",
    "data": "an integer",
}


def type_fits(role: str, arg: ScriptArg) -> bool:
    """Whether ``arg``'s type is one ``role`` can be a knob of."""
    if role == "precision":
        return arg.type in ("bool", "str")
    if role in ("micro_batch", "grad_accum", "threads", "data"):
        return arg.type == "int"
    return True


# what a user may name an argument as (``manifest draft --role NAME=ROLE``)
KNOB_ROLES = tuple(role for role, _ in ROLE_NAMES)
NAMEABLE = ("steps", "seed", *KNOB_ROLES)


def role_of(arg: ScriptArg) -> str | None:
    """The role the user named for the argument, else the one its name says it plays, else
    its help text (None: none recognised)."""
    if arg.named is not None:
        return arg.named if arg.named in KNOB_ROLES else None
    name = arg.dest.lower()
    if re.search(EVAL_ONLY, name) or re.search(r"\beval|\bvalidation", arg.help.lower()):
        return None
    for role, pattern in ROLE_NAMES:
        if re.search(pattern, name) and type_fits(role, arg):
            return role
    if placed_otherwise(arg):  # the step count, the seed, the logging interval
        return None
    for role, pattern in ROLE_HELPS:
        if re.search(pattern, arg.help.lower()) and type_fits(role, arg):
            return role
    return None


def placed_otherwise(arg: ScriptArg) -> bool:
    """Whether the argument is already read as something else than a knob's role: the step
    count, the seed, the logging interval, or an evaluation-only setting."""
    if arg.named is not None:
        return arg.named in ("steps", "seed")
    return (
        is_steps(arg)
        or is_seed(arg)
        or is_log_every(arg)
        or re.search(EVAL_ONLY, arg.dest.lower()) is not None
    )


def is_steps(arg: ScriptArg) -> bool:
    """Whether the argument sets the number of optimizer steps (named so, or by its name)."""
    if arg.named is not None:
        return arg.named == "steps"
    return arg.type == "int" and re.search(STEPS, arg.dest.lower()) is not None


def is_seed(arg: ScriptArg) -> bool:
    """Whether the argument seeds the run (what the challenge seed sets)."""
    if arg.named is not None:
        return arg.named == "seed"
    return arg.type == "int" and re.search(SEED, arg.dest.lower()) is not None


def is_log_every(arg: ScriptArg) -> bool:
    """Whether the argument sets how often the script logs (set to every step in a trial)."""
    return arg.type == "int" and re.search(LOG_EVERY, arg.dest.lower()) is not None
