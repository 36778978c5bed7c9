"""Optional: an LLM places the arguments the rules cannot (a batch size called ``n_seqs``, an
accumulation called ``k``), from what the script declares about them (name, type, default,
choices, help). Its answer is checked as the rules' guesses are — a known role, at most one
argument per role, the type the role needs — and every role it sets is said in the notes;
what it gets wrong is dropped with the reason, and a failed request leaves the rules' draft
as it was."""

from __future__ import annotations

import json
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from infrarsi import llm
from infrarsi.draft import roles
from infrarsi.draft.arguments import ScriptArg

SYSTEM_PROMPT = """You read the command-line arguments of a PyTorch training script and say
which of them plays one of these roles (or null when none does):
  micro_batch: sequences (samples) per forward pass on one process;
  grad_accum: micro-steps accumulated per optimizer step;
  precision: the compute precision (bf16, fp16, amp, a dtype);
  compile: whether or how the model is compiled (torch.compile);
  activation_checkpointing: whether activations are recomputed in the backward pass;
  threads: CPU threads per process; data: data-loading worker processes;
  optimizer: which optimizer, or whether a fused one is used;
  attention: which attention implementation.
An argument for evaluation, logging, paths or the model's size has no role.
Answer with JSON only: {"roles": {"<argument name>": "<role>" or null, ...}}."""
SHOWN_ARGS = 60  # the unplaced arguments the LLM is shown


class LLMRoles(BaseModel):
    """The LLM's answer, before it is checked."""

    model_config = ConfigDict(extra="forbid")
    roles: dict[str, str | None]


def describe(arg: ScriptArg) -> str:
    """One line about an argument, as the script declares it."""
    parts = [f"{arg.dest}: type {arg.type or 'unknown'}, default {arg.default!r}"]
    if arg.choices:
        parts.append(f"choices {list(arg.choices)!r}")
    if arg.switch:
        parts.append("a switch (present or absent)")
    if arg.help:
        parts.append(f"help {arg.help[:160]!r}")
    return "; ".join(parts)


def guess_roles(
    unplaced: list[ScriptArg],
    taken: set[str],
    ask: Callable[[str, str], str] = llm.complete,
) -> tuple[dict[str, ScriptArg], list[str]]:
    """The roles the LLM gives ``unplaced`` arguments (role -> argument; none of ``taken``,
    the roles the rules placed), and notes: each role set, each answer dropped and why."""
    shown = unplaced[:SHOWN_ARGS]
    if not shown:
        return {}, []
    try:
        reply = ask(SYSTEM_PROMPT, "\n".join(describe(a) for a in shown))
        answer = LLMRoles.model_validate(json.loads(llm.json_object(reply)))
    except Exception as exc:  # the optional path failed: the rules' draft stands
        return {}, [f"the LLM was asked for the arguments' roles and not used ({llm.short(exc)})"]
    return check_roles(answer, {a.dest: a for a in shown}, taken)


def check_roles(
    answer: LLMRoles, args: dict[str, ScriptArg], taken: set[str]
) -> tuple[dict[str, ScriptArg], list[str]]:
    """The LLM's roles that hold (role -> argument), and notes for each kept and dropped."""
    placed: dict[str, ScriptArg] = {}
    notes = []
    for name, role in answer.roles.items():
        if role is None:
            continue
        arg = args.get(name)
        why = _refused(role, arg, taken, placed)
        if why or arg is None:
            notes.append(f"the LLM's role for {name} was dropped: {why}")
            continue
        placed[role] = arg
        notes.append(f"{name}: role {role}, guessed by the LLM (a name the rules do not know)")
    return placed, notes


def _refused(
    role: str, arg: ScriptArg | None, taken: set[str], placed: dict[str, ScriptArg]
) -> str | None:
    """Why the LLM's ``role`` for ``arg`` cannot stand, or None."""
    if arg is None:
        return "the script declares no such argument"
    if role not in {r for r, _ in roles.ROLE_NAMES}:
        return f"{role!r} is not a role"
    if role in taken:
        return f"the rules placed {role} already"
    if role in placed:
        return f"another argument took {role}"
    if not roles.type_fits(role, arg):
        return f"{role} needs {roles.TYPE_NEEDED[role]}, not {arg.type}"
    return None
