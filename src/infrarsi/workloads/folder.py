"""Copies of a workload's folder: for a trial, an evaluation, a patch check or an output."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

# what a copy of a workload's folder leaves out: the tool's own state (run in the workload's
# folder, its trials live there), version control, virtual environments and compiled caches
COPY_SKIP = (".infrarsi", ".git", ".venv", "venv", "__pycache__", "*.pyc")


def copy_workload(
    src: Path, dst: Path, *also: str, copy: Callable[[str, str], object] = shutil.copy2
) -> None:
    """A copy of the workload's folder ``src`` at ``dst`` for a trial, an evaluation or an
    output, without ``COPY_SKIP``, the patterns ``also`` and, where ``dst`` lies inside
    ``src`` (the trials kept in the workload's own folder), the folder holding ``dst``."""
    by_pattern = shutil.ignore_patterns(*COPY_SKIP, *also)
    target = Path(dst).resolve()

    def ignore(folder: str, names: list[str]) -> set[str]:
        inside = {n for n in names if target.is_relative_to(Path(folder, n).resolve())}
        return set(by_pattern(folder, names)) | inside

    shutil.copytree(src, dst, ignore=ignore, copy_function=copy)
