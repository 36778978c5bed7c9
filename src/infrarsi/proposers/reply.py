"""Reading an LLM's reply: exactly one unified diff, and the expectation stated beside it.

The prompt asks for one fenced ``diff`` block and one fenced ``json`` block. A reply with no
diff, or with more than one, is rejected at the ``parse`` stage with the count; a missing or
invalid expectation is not a rejection — the patch then carries no prior (ratios of 1) and the
reason is kept.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from pydantic import ValidationError

from infrarsi.proposal import Expectation

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_DIFF_LANGS = {"diff", "patch", "udiff"}


class ReplyRejected(ValueError):
    """A reply that holds no usable diff; the message is the reason recorded."""


@dataclass(frozen=True)
class Reply:
    """The diff of a reply (ending with a newline) and its expectation."""

    diff: str
    expectation: Expectation
    note: str = ""


def parse_reply(text: str) -> Reply:
    """The one diff and the expectation of a reply; ReplyRejected naming what is wrong."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text or "")]
    diffs = [
        body
        for lang, body in blocks
        if lang in _DIFF_LANGS or (lang != "json" and _first_header(body) is not None)
    ]  # a diff in a python block
    start = _first_header(text or "")
    if not diffs and start is not None:  # a bare diff, without fences: up to its last line
        diffs = [_diff_lines(text[start:])]
    if not diffs:
        raise ReplyRejected("the reply holds no unified diff (one ```diff block is asked)")
    if len(diffs) > 1:
        raise ReplyRejected(f"the reply holds {len(diffs)} diffs; exactly one is asked")
    diff = diffs[0]
    if not re.search(r"^@@ ", diff, re.MULTILINE):
        raise ReplyRejected("the diff has no hunk (no '@@' line): not a unified diff")
    expectation, note = _expectation(
        [body for lang, body in blocks if lang == "json"]
        or re.findall(r"\{[^{}]*step_time_ratio[^{}]*\}", text or "")
    )
    return Reply(diff if diff.endswith("\n") else diff + "\n", expectation, note)


_DIFF_LINE = re.compile(
    r"^(?:[ +\-@\\]|diff --git |index |new file|deleted file|"
    r"similarity |rename |old mode|new mode|$)"
)


def _diff_lines(text: str) -> str:
    """A bare diff without the prose that follows it."""
    lines = text.splitlines()
    end = next((i for i, line in enumerate(lines) if not _DIFF_LINE.match(line)), len(lines))
    while end and not lines[end - 1].strip():
        end -= 1
    return "\n".join(lines[:end]) + "\n"


def _first_header(text: str) -> int | None:
    """Where the first diff header of ``text`` starts (None without one)."""
    match = re.search(r"^(?:diff --git |--- )", text, re.MULTILINE)
    return match.start() if match else None


def _expectation(candidates: list[str]) -> tuple[Expectation, str]:
    for body in candidates:
        try:
            return Expectation.model_validate(json.loads(body)), ""
        except (json.JSONDecodeError, ValidationError, TypeError) as exc:
            reason = str(exc).splitlines()[0][:160]
            return Expectation(), f"the stated expectation was not used ({reason})"
    return Expectation(), "no expectation was stated: the patch carries no prior"
