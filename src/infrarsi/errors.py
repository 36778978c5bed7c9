"""What a user can fix, told apart from what is a bug.

``InfraRSIError`` is bad input: a file, a name, a value or a setting the person running the tool
can change, with a message that names the field and the fix. The command line turns it, and only
it, into one ``error:`` line and exit code 2; any other exception is a bug in InfraRSI and is
reported as one. Every stage's own error class derives from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class InfraRSIError(ValueError):
    """Bad input the user can fix; the message names the field and the fix."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownNameError(InfraRSIError, KeyError):
    """A name that is not there (a knob, a scale, a patch, a run, an experience), with the names
    that are. Still a ``KeyError`` for code that looks names up; shown without quotes."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def field_problems(errors: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each validation error of a file (pydantic's ``exc.errors()``) in the project's own
    words: ``field 'a.b': what is wrong and the fix`` — never the library's raw text or its web
    link. A union's branch that another branch explains better is left out."""
    lines = []
    for err in errors:
        if _other_branch(err, errors):
            continue
        loc = ".".join(str(p) for p in err["loc"] if not _branch_name(p)) or "(top level)"
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "required field is missing: add it"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field: remove it or check its spelling"
        lines.append(f"field '{loc}': {msg}")
    return lines


def _branch_name(part: object) -> bool:
    """A location part naming a branch of a union (``StdoutMetrics``, ``literal['probe']``)."""
    return isinstance(part, str) and (part[:1].isupper() or part.startswith("literal["))


def _other_branch(err: Mapping[str, Any], errors: Sequence[Mapping[str, Any]]) -> bool:
    """True for a union branch's literal mismatch when another branch says more."""
    if err["type"] != "literal_error" or not err["loc"] or not _branch_name(err["loc"][-1]):
        return False
    prefix = err["loc"][:-1]
    return any(e is not err and e["loc"][: len(prefix)] == prefix for e in errors)
