"""Which executor a command runs its trials on, by name (``--executor local|ray``)."""

from __future__ import annotations

from pathlib import Path

from infrarsi.errors import InfraRSIError
from infrarsi.executors import Executor, LocalExecutor

EXECUTORS = ("local", "ray")


def make_executor(kind: str, root: Path, ray_address: str | None = None) -> Executor:
    """The executor ``kind`` names, rooted at ``root``: ``local`` (this machine, one trial at
    a time) or ``ray`` (the cluster at ``ray_address``, 'auto' by default); ValueError naming
    the choices, ``RayUnavailable`` when Ray or its cluster is missing."""
    if kind == "local":
        return LocalExecutor(root)
    if kind == "ray":
        from infrarsi.executors.ray_executor import RayExecutor

        return RayExecutor(root, ray_address or "auto")
    raise InfraRSIError(f"executor {kind!r}: choose one of {', '.join(EXECUTORS)}")
