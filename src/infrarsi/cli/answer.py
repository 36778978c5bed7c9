"""A ``--json`` command's stdout: its one answer and nothing else.

Libraries print to stdout on their own schedule — Ray's driver prints a lost node's raylet
log there from a background thread, even after the command has answered — so a command in
``--json`` mode sends every other write to stderr from its first step on and writes its answer
to the stdout it kept. A caller then reads the answer as the whole of stdout."""

from __future__ import annotations

import sys
from typing import TextIO


def keep_stdout_for_the_answer() -> TextIO:
    """The process's stdout, kept for the answer; from now on ``sys.stdout`` is stderr, for
    the rest of the process (a thread that prints late prints to stderr too)."""
    answer = sys.stdout
    sys.stdout = sys.stderr
    return answer


def print_answer(text: str, answer: TextIO) -> None:
    """Write the one answer (a JSON document) to the stdout kept for it."""
    answer.write(text.rstrip("\n") + "\n")
    answer.flush()
