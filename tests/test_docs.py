"""Every ``infrarsi`` command written in the README and in ``docs/`` parses against the CLI: its
subcommand exists and each ``--flag`` it uses is one that subcommand's ``--help`` lists (a
renamed option would otherwise leave the guide wrong without a sound)."""

import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"(?:\.venv/bin/)?infrarsi\s+([a-z][a-z-]*)((?:[^\n`#|]|\\\n)*)")


def commands(page: Path) -> list[tuple[str, list[str]]]:
    """(subcommand, the words after it) of each ``infrarsi`` command in a page's code blocks
    and inline code."""
    text = page.read_text()
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", text, re.S) + re.findall(r"`([^`\n]+)`", text)
    out = []
    for block in blocks:
        for match in COMMAND.finditer(block):
            sub, rest = match.group(1), match.group(2).replace("\\\n", " ")
            try:
                words = shlex.split(rest, comments=True)
            except ValueError:  # an inline fragment with an open quote: flags still count
                words = rest.split()
            out.append((sub, words))
    return out


def path_and_flags(sub: str, words: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """The command path (``bank list``, ``manifest draft``: a sub-command when the word after
    ``sub`` names one) and the --flags given to it, up to a ``--`` (what follows belongs to
    the user's own command)."""
    path: tuple[str, ...] = (sub,)
    if words and re.fullmatch(r"[a-z][a-z-]*", words[0]) and help_of((sub, words[0])):
        path, words = (sub, words[0]), words[1:]
    if "--" in words:
        words = words[: words.index("--")]
    return path, [w.split("=")[0] for w in words if w.startswith("--")]


@cache
def help_of(path: tuple[str, ...]) -> str | None:
    result = subprocess.run(
        [sys.executable, "-m", "infrarsi", *path, "--help"],
        capture_output=True,
        text=True,
        env={"COLUMNS": "400", "PATH": "/usr/bin:/bin", "TERM": "dumb"},
        timeout=120,
    )
    return result.stdout if result.returncode == 0 else None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_in_the_guide_parses_against_the_cli(page):
    found = commands(page)
    problems = []
    for sub, words in found:
        path, flags = path_and_flags(sub, words)
        text = help_of(path)
        if text is None:
            problems.append(f"`infrarsi {sub}`: no such command")
            continue
        problems += [
            f"`infrarsi {' '.join(path)} {f}`: no such option"
            for f in flags
            if not re.search(re.escape(f) + r"(?![\w-])", text)
        ]
    assert not problems, f"{page.name}: " + "; ".join(sorted(set(problems)))


def test_the_guide_has_commands_to_check():
    assert len(commands(ROOT / "README.md")) >= 4
