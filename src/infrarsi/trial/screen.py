"""Static screening of a patch: the lines a speed-up has no business adding, flagged with why.

A first filter, never the verdict: a flag is shown in the trial record, the verdict and the
report, and the dynamic checks (weights, evaluation, time and memory owned by the harness)
decide. Only lines the patch adds are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MODULES = (
    r"time|resource|os|sys|ctypes|subprocess|signal|importlib|builtins|gc|infrarsi|"
    r"pathlib|shutil|glob|pickle|mmap|socket|threading|multiprocessing|atexit|inspect|"
    r"random|tempfile|json"
)
RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "imports a module that reaches the clock, the process or the file system",
        re.compile(rf"^\s*(?:import|from)\s+(?:{_MODULES})\b"),
    ),
    (
        "monkeypatches a module attribute",
        re.compile(
            r"^\s*(?:torch|time|os|sys|probe|infrarsi|builtins|math|random|np|numpy|F|nn|"
            r"dist)(?:\.\w+)+\s*=(?!=)|\bsetattr\s*\(|__builtins__|\bglobals\s*\(\s*\)"
        ),
    ),
    (
        "changes what gets a gradient",
        re.compile(
            r"\bno_grad\b|\binference_mode\b|\.detach\s*\(|\bdetach_\b|requires_grad|"
            r"set_grad_enabled"
        ),
    ),
    (
        "changes the precision",
        re.compile(r"\bautocast\b|\.half\s*\(|\.bfloat16\s*\(|torch\.(?:b?float16|half)\b"),
    ),
    (
        "reads or writes files",
        re.compile(
            r"\bopen\s*\(|\bPath\s*\(|read_text|read_bytes|"
            r"torch\.load\b|np\.load\b"
        ),
    ),
    ("runs code built at run time", re.compile(r"(?<![\w.])(?:exec|eval|__import__)\s*\(")),
    ("reads the environment", re.compile(r"\benviron\b|\bgetenv\b")),
)


@dataclass(frozen=True)
class Flag:
    """One added line that a rule flags."""

    path: str
    line: int
    reason: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}: {self.text}"


def screen(diff: str) -> list[Flag]:
    """Every added line of a unified diff that a rule flags, in order (one flag per line)."""
    flags, path, line_no = [], "?", 0
    for line in diff.splitlines():
        if line.startswith("+++ "):
            path = line[4:].strip().removeprefix("b/")
        elif line.startswith("@@"):
            match = re.search(r"\+(\d+)", line)
            line_no = int(match.group(1)) - 1 if match else 0
        elif line.startswith("+"):
            line_no += 1
            flags += _flag(path, line_no, line[1:])
        elif not line.startswith("-"):
            line_no += 1
    return flags


def _flag(path: str, line_no: int, text: str) -> list[Flag]:
    code = text.split("#", 1)[0]
    for reason, pattern in RULES:
        if pattern.search(code):
            return [Flag(path, line_no, reason, text.strip()[:100])]
    return []
