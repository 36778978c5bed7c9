"""Unified-diff patches: which paths they touch, whether they may touch them, and applying them.

A patch is checked before anything runs: every path it names must stay inside the workspace,
match an editable glob and no locked glob (nor link to a locked file), and it may not create
symlinks. Workspaces are copies with links resolved, so a workload may share files with another
through links: a patch then changes the trial's copy, never the shared file. Applying uses
``git apply`` (with repository discovery switched off, so an enclosing repository cannot change
what it does), first with ``--check`` so a patch that does not fit changes nothing.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from infrarsi.errors import InfraRSIError


class PatchRefused(InfraRSIError):
    """A patch that may not be applied: it touches a locked file or leaves the editable set."""


class PatchFailed(RuntimeError):
    """A patch that was allowed but does not apply to the workspace (context mismatch)."""


@dataclass(frozen=True)
class DiffPaths:
    """The paths a diff touches, and whether it creates or changes anything into a symlink."""

    paths: tuple[str, ...]
    symlink: bool


def diff_paths(diff: str) -> DiffPaths:
    """Every path a unified (or git) diff names: old and new sides, renames and copies."""
    paths: list[str] = []
    symlink = False
    for line in diff.splitlines():
        if line.startswith(("--- ", "+++ ")):
            paths.append(_strip_side(line[4:]))
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            paths.append(_unquote(line.split(" ", 2)[2]))
        elif line.startswith("diff --git "):
            paths.extend(_strip_side(p) for p in line[len("diff --git ") :].split(" ", 1))
        elif line.startswith(("new file mode 120000", "new mode 120000")):
            symlink = True
    unique = tuple(dict.fromkeys(p for p in paths if p and p != "/dev/null"))
    return DiffPaths(unique, symlink)


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1].encode().decode("unicode_escape")
    return text


def _strip_side(text: str) -> str:
    path = _unquote(text.split("\t", 1)[0])
    if path.startswith(("a/", "b/")):
        path = path[2:]
    return path


def matches(path: str, globs: list[str]) -> bool:
    """True when the relative POSIX path matches one of the globs (fnmatch, ``*`` spans ``/``)."""
    return any(fnmatch.fnmatchcase(path, g) for g in globs)


def check_paths(diff: str, root: Path, editable: list[str], locked: list[str]) -> list[str]:
    """Why this diff may not be applied to a copy of ``root`` (empty list: it may)."""
    touched = diff_paths(diff)
    if not touched.paths:
        return ["the diff names no file (is it a unified diff?)"]
    reasons = ["it creates a symlink"] if touched.symlink else []
    for path in touched.paths:
        reasons += _path_reasons(path, root, editable, locked)
    return reasons


def _path_reasons(path: str, root: Path, editable: list[str], locked: list[str]) -> list[str]:
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts:
        return [f"{path}: outside the workspace"]
    names = {path}
    real = (root / pure).resolve()
    if real.is_relative_to(root.resolve()):  # a link inside the workload: judge its target too
        names.add(real.relative_to(root.resolve()).as_posix())
    if any(matches(name, locked) for name in names):
        return [f"{path}: locked file"]
    if not matches(path, editable):
        return [f"{path}: not an editable file (editable: {', '.join(editable)})"]
    return []


def _git_apply(diff_file: Path, workspace: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(workspace.resolve().parent)}
    return subprocess.run(
        ["git", "apply", *extra, str(Path(diff_file).resolve())],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
    )


def applies(diff_file: Path, workspace: Path) -> bool:
    """Whether the diff would apply inside ``workspace`` (nothing is changed)."""
    return _git_apply(diff_file, Path(workspace), "--check").returncode == 0


def does_not_apply(diff_file: Path, root: Path) -> str | None:
    """Why the diff does not apply to the files in ``root`` (git's words), or None when it
    does; nothing is changed."""
    result = _git_apply(diff_file, Path(root), "--check")
    return result.stderr.strip() or "git apply refused it" if result.returncode else None


def apply(diff_file: Path, workspace: Path) -> None:
    """Apply one diff inside ``workspace``; PatchFailed with git's message when it does not fit."""
    for extra in (["--check"], []):
        result = _git_apply(diff_file, Path(workspace), *extra)
        if result.returncode != 0:
            raise PatchFailed(f"{Path(diff_file).name} does not apply: {result.stderr.strip()}")
