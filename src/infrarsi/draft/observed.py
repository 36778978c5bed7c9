"""Roles read from what the run did, whatever the arguments are called: an argument is the
micro-batch when its value is the batch a ``DataLoader`` was built with or the rows the model's
first forward was given, the accumulation when it is the number of backward calls each optimizer
step ran, the thread count when it reached ``torch.set_num_threads`` — as the dry run's observer
saw them (``sandbox/_hooks/infrarsi_observe.py``). A value can match by chance (a batch of 4
and a width of 4), so a candidate is a role only once a second dry run, with every candidate
changed to a value of its own, shows the observed quantity follow it. Pure functions: the runs
are the caller's."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from infrarsi.draft import roles
from infrarsi.draft.arguments import ScriptArg

# the observed quantity of each role a run can show, by the observer's record
FOLLOWED = ("micro_batch", "grad_accum", "threads")


@dataclass(frozen=True)
class Candidate:
    """An argument whose value is one the run showed for ``role``, its value in the run, and
    the value a second run gives it to see whether the role follows."""

    dest: str
    role: str
    value: int
    trial_value: int


def parsed_values(observed: list[dict[str, Any]]) -> dict[str, Any]:
    """The arguments the script's parser returned (the last parse of the run)."""
    parsed = [r["values"] for r in observed if r.get("kind") == "args"]
    return dict(parsed[-1]) if parsed else {}


def shown(observed: list[dict[str, Any]]) -> dict[str, set[int]]:
    """The values the run showed for each role: the batch sizes a ``DataLoader`` was given and
    the rows of the first forward (micro_batch), the backward calls of a step (grad_accum),
    the thread counts set (threads)."""
    out: dict[str, set[int]] = {role: set() for role in FOLLOWED}
    for r in observed:
        what, value = r.get("what"), r.get("value")
        if r.get("kind") == "seen" and isinstance(value, int) and not isinstance(value, bool):
            if what in ("dataloader.batch_size", "forward.batch"):
                out["micro_batch"].add(value)
            elif what == "set_num_threads":
                out["threads"].add(value)
    backwards = [r.get("backwards") for r in observed if r.get("kind") == "step"]
    known = [b for b in backwards if isinstance(b, int) and b > 0]
    if known:
        out["grad_accum"].add(int(statistics.mode(known)))
    return out


def candidates(
    args: Iterable[ScriptArg], placed: set[str], taken: set[str], observed: list[dict]
) -> list[Candidate]:
    """The integer arguments not yet placed (``placed``: destinations with a role, a step
    count, a seed) whose run value is what the run showed for a role still missing
    (``taken``: the roles already found), each with the distinct value a second run tries."""
    values, seen = parsed_values(observed), shown(observed)
    found: list[Candidate] = []
    used = {v for v in values.values() if isinstance(v, int)}
    for arg in args:
        value = values.get(arg.dest)
        if arg.dest in placed or roles.placed_otherwise(arg) or not _int(value):
            continue
        for role in FOLLOWED:
            if role in taken or value not in seen[role] or value < 1:
                continue
            if role == "grad_accum" and value == 1:  # one backward a step says nothing
                continue
            trial = _fresh(value, used)
            used.add(trial)
            found.append(Candidate(arg.dest, role, value, trial))
            break
    return found


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fresh(value: int, used: set[int]) -> int:
    """The nearest value above ``value`` that no argument of the run holds."""
    trial = value + 1
    while trial in used:
        trial += 1
    return trial


def followed(found: list[Candidate], second: list[dict]) -> tuple[dict[str, str], list[str]]:
    """({dest: role} of the candidates whose role followed their changed value in the second
    run, notes for every candidate, confirmed or not). Of two candidates for one role, the one
    followed wins; where both are (or neither), none is taken."""
    seen = shown(second)
    confirmed: dict[str, str] = {}
    notes = []
    by_role: dict[str, list[Candidate]] = {}
    for c in found:
        by_role.setdefault(c.role, []).append(c)
    for role, group in by_role.items():
        kept = [c for c in group if c.trial_value in seen[role]]
        for c in group:
            if len(kept) == 1 and c is kept[0]:
                confirmed[c.dest] = role
                notes.append(
                    f"{c.dest}: {role}, from the run — {_what(role)} was {c.value} as the "
                    f"argument was, and {c.trial_value} when a second dry run gave it "
                    f"{c.trial_value}"
                )
            else:
                notes.append(
                    f"{c.dest}: its value {c.value} was {_what(role)} in the run, but "
                    f"{_not_followed(c, kept)}: not read as {role}"
                )
    return confirmed, notes


def _not_followed(c: Candidate, kept: list[Candidate]) -> str:
    if c in kept:
        return "another argument's change was followed as well"
    return f"given {c.trial_value} in a second dry run, it did not follow"


def _what(role: str) -> str:
    return {
        "micro_batch": "the batch a DataLoader or the model's first forward was given",
        "grad_accum": "the backward calls each optimizer step ran",
        "threads": "the thread count torch.set_num_threads was given",
    }[role]


def unseen(found: dict[str, ScriptArg], observed: list[dict]) -> list[str]:
    """Notes for the roles read without the run (a name, a use in the source, the user's
    ``--role``) whose value the run showed something else for: the micro-batch argument at 4
    where every DataLoader and the first forward had 8 — to check, not refused (a script may
    pass it on in ways the observer does not see)."""
    values, seen = parsed_values(observed), shown(observed)
    notes = []
    for role, arg in found.items():
        value = values.get(arg.dest)
        if role not in FOLLOWED or not seen[role] or not _int(value) or value in seen[role]:
            continue
        if role == "grad_accum" and seen[role] == {1} and value == 1:
            continue
        how = "named so" if arg.named else "read so"
        shown_values = ", ".join(str(v) for v in sorted(seen[role]))
        notes.append(
            f"{arg.dest} ({role}, {how}): its value {value} was not {_what(role)} in the dry "
            f"run ({shown_values}): check it"
        )
    return notes
