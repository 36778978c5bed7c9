"""One run per output folder: a lock taken on the folder where a run writes (``optimize
--out``, a search's run directory) before anything is measured, so a second run on the same
folder is refused at once — naming the process that holds it — instead of two Doctors writing
one store. The lock is the kernel's (``flock`` on ``<folder>/.lock``): a killed run's lock is
gone with its process, never stale. Taken again by the process that holds it, it is a no-op
(``optimize`` holds its folder and then its rounds' run directories)."""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from infrarsi.errors import InfraRSIError

LOCK_FILE = ".lock"
_held: dict[str, int] = {}  # resolved folder -> the open descriptor holding its lock


class FolderBusy(InfraRSIError):
    """Another process is running in this folder."""


@contextmanager
def holding(folder: Path, create: bool = True) -> Iterator[None]:
    """Hold ``folder``'s lock for the block (the folder made if missing; with ``create``
    False, a missing folder is not locked — the caller finds it missing); FolderBusy naming
    the holder when another process has it."""
    key = str(Path(folder).resolve())
    if key in _held or (not create and not Path(key).is_dir()):  # held here already
        yield
        return
    Path(key).mkdir(parents=True, exist_ok=True)
    fd = os.open(os.path.join(key, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise FolderBusy(
            f"{key} is in use by another run ({holder}): wait for it to end, or give another "
            "output folder (--out)"
        ) from None
    _say_holder(fd)
    _held[key] = fd
    try:
        yield
    finally:
        del _held[key]
        os.close(fd)  # the lock goes with the descriptor


def _say_holder(fd: int) -> None:
    """Who holds the lock, for the process refused it to say."""
    os.ftruncate(fd, 0)
    mine = {"pid": os.getpid(), "command": " ".join(sys.argv[:4]), "since_unix_s": time.time()}
    os.pwrite(fd, json.dumps(mine).encode(), 0)


def _holder(fd: int) -> str:
    try:
        said = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        said = {}
    pid = said.get("pid")
    if not pid:
        return "a process that has not said which"
    since = time.strftime("%H:%M:%S", time.localtime(said.get("since_unix_s", 0)))
    return f"pid {pid}, `{said.get('command', '?')}` since {since}"
