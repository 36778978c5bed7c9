"""Per-rank memory, owned by the harness: one memory cgroup per rank, its limit the capacity.

The quantity InfraRSI caps and records is the memory the kernel charges to a rank: anonymous
memory (tensors, allocator caches, thread stacks actually touched), shared memory it creates
(``/dev/shm`` files, ``MAP_SHARED`` mappings), page cache it fills, and kernel memory on its
behalf — from the moment the rank's interpreter starts (the bootstrap hook joins the cgroup
before anything is imported). The capacity is that cgroup's limit and the peak is the kernel's
own high-water mark of the same counter, so ``peak > capacity`` and "ran out of memory" agree
to the page: an allocation beyond the capacity ends the rank (the kernel's OOM killer, counted
in the cgroup's ``oom_kill``), which the harness reads as ``oom`` with the capacity as bound.

cgroup v1 (``memory.limit_in_bytes``, ``memory.max_usage_in_bytes``) and v2 (``memory.max``,
``memory.peak``) are both read. The harness creates ``infrarsi-<owner pid>-<trial id>`` under its
own memory cgroup; each rank creates ``rank<N>`` inside it and moves itself there (see
``_hooks/sitecustomize.py``, which repeats the few file names below with the standard library
only). The launchers start in ``launchers`` inside it, so every process of the trial is
accounted: what a launcher holds (torchrun's rendezvous store, which a rank can fill) is its
peak, compared with the baseline's by ``verify``. Where no writable memory cgroup exists,
:func:`detect` says why.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

PREFIX = "infrarsi-"
LAUNCHERS = "launchers"
DIR_ENV = "INFRARSI_MEMCG_DIR"
VERSION_ENV = "INFRARSI_MEMCG_VERSION"
_FILES = {
    1: {"peak": "memory.max_usage_in_bytes", "limit": "memory.limit_in_bytes"},
    2: {"peak": "memory.peak", "limit": "memory.max"},
}


class MemcgUnavailable(RuntimeError):
    """No writable memory cgroup: a per-rank capacity cannot be enforced here."""


@dataclass(frozen=True)
class Hierarchy:
    """The harness's own memory cgroup, under which trial cgroups are made."""

    version: int
    path: Path


@dataclass(frozen=True)
class RankMemory:
    """What the kernel recorded for one rank: its peak charge and how many OOM kills."""

    peak_bytes: int
    oom_kills: int


def _own_cgroup(proc_cgroup: str) -> tuple[int, str] | None:
    """(version, path) of the memory controller in a ``/proc/PID/cgroup`` text."""
    v2 = None
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return 1, path
        if controllers == "":
            v2 = (2, path)
    return v2


def _mount_point(mountinfo: str, version: int) -> Path | None:
    """Where the memory hierarchy of ``version`` is mounted, from ``/proc/self/mountinfo``."""
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fstype, _, options = (right.split(" ") + ["", ""])[:3]
        mount = left.split(" ")[4]
        if version == 1 and fstype == "cgroup" and "memory" in options.split(","):
            return Path(mount)
        if version == 2 and fstype == "cgroup2":
            return Path(mount)
    return None


def detect() -> Hierarchy:
    """This process's memory cgroup when a child can be made in it; MemcgUnavailable saying
    why not."""
    try:
        own = _own_cgroup(Path("/proc/self/cgroup").read_text())
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError as exc:
        raise MemcgUnavailable(f"cannot read this process's cgroups ({exc})") from None
    if own is None:
        raise MemcgUnavailable("no memory cgroup controller is mounted")
    version, rel = own
    mount = _mount_point(mountinfo, version)
    if mount is None:
        raise MemcgUnavailable(f"the cgroup v{version} hierarchy is not mounted")
    path = mount / rel.lstrip("/")
    if version == 2 and "memory" not in _read(path / "cgroup.controllers").split():
        raise MemcgUnavailable(f"{path}: the memory controller is not delegated to this cgroup")
    if not os.access(path, os.W_OK):
        raise MemcgUnavailable(f"{path} is not writable: run as root or in a delegated cgroup")
    return Hierarchy(version, path)


def available() -> Hierarchy | None:
    """The hierarchy, or None where per-rank memory cgroups cannot be made."""
    try:
        return detect()
    except MemcgUnavailable:
        return None


class TrialCgroup:
    """The cgroup of one trial: made before launch, read and removed after every rank ended."""

    def __init__(self, hierarchy: Hierarchy, trial_id: str) -> None:
        self.hierarchy = hierarchy
        self.path = hierarchy.path / f"{PREFIX}{os.getpid()}-{trial_id}"
        self.path.mkdir()
        if hierarchy.version == 2:
            try:
                _enable_memory(self.path)
            except OSError as exc:
                remove_tree(self.path, wait_s=1.0)
                raise MemcgUnavailable(
                    f"{self.path}: the memory controller cannot be enabled below it ({exc})"
                ) from None

    @property
    def launchers_procs(self) -> Path:
        """The file a launcher writes its pid to, between fork and exec, to join ``launchers``."""
        folder = self.path / LAUNCHERS
        folder.mkdir(exist_ok=True)
        return folder / "cgroup.procs"

    def launchers(self) -> RankMemory | None:
        """Peak and OOM kills of the launchers' cgroup, None when no launcher joined it."""
        folder = self.path / LAUNCHERS
        return read_rank(folder, self.hierarchy.version) if folder.is_dir() else None

    def env(self) -> dict[str, str]:
        """What the ranks' bootstrap hook needs to find and join its cgroup."""
        return {DIR_ENV: str(self.path), VERSION_ENV: str(self.hierarchy.version)}

    def ranks(self) -> dict[int, RankMemory]:
        """Peak and OOM kills of every rank that joined, by rank."""
        out = {}
        for child in self.path.glob("rank*"):
            match = re.fullmatch(r"rank(\d+)", child.name)
            if match:
                out[int(match.group(1))] = read_rank(child, self.hierarchy.version)
        return dict(sorted(out.items()))

    def oom_killed(self) -> list[int]:
        """Ranks whose cgroup has recorded an OOM kill so far."""
        return [rank for rank, mem in self.ranks().items() if mem.oom_kills]

    def remove(self, wait_s: float = 5.0) -> None:
        """Remove the rank cgroups and the trial's; waits for exiting processes to leave."""
        remove_tree(self.path, wait_s)


def _enable_memory(path: Path) -> None:
    """Turn the memory controller on for ``path``'s children (the ranks' cgroups), first for
    ``path`` itself where its parent has not (a parent that holds processes refuses: OSError)."""
    if "memory" not in _read(path / "cgroup.controllers").split():
        (path.parent / "cgroup.subtree_control").write_text("+memory")
    (path / "cgroup.subtree_control").write_text("+memory")


def read_rank(path: Path, version: int) -> RankMemory:
    """Peak charge and OOM-kill count of one rank's cgroup."""
    peak = int(_read(path / _FILES[version]["peak"]) or 0)
    events = _read(path / ("memory.oom_control" if version == 1 else "memory.events"))
    kills = re.search(r"^oom_kill (\d+)$", events, re.MULTILINE)
    return RankMemory(peak_bytes=peak, oom_kills=int(kills.group(1)) if kills else 0)


def remove_tree(path: Path, wait_s: float = 5.0) -> bool:
    """rmdir ``path`` and its child cgroups once they hold no process; True when gone."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            for child in [p for p in path.iterdir() if p.is_dir()]:
                child.rmdir()
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


@contextlib.contextmanager
def trial_cgroup(trial_id: str, owner_alive: Callable[[int], bool]) -> Iterator[TrialCgroup | None]:
    """The trial's cgroup for the block (cgroups of harnesses that are gone swept first),
    removed after it; None where this host has no memory cgroup hierarchy."""
    hierarchy = available()
    if hierarchy is None:
        yield None
        return
    sweep_stale(hierarchy, owner_alive)
    try:
        cgroup = TrialCgroup(hierarchy, trial_id)
    except MemcgUnavailable:
        yield None
        return
    try:
        yield cgroup
    finally:
        cgroup.remove()


def sweep_stale(hierarchy: Hierarchy, owner_alive) -> int:
    """Remove trial cgroups left by harness processes that are gone; how many were removed."""
    removed = 0
    for path in hierarchy.path.glob(f"{PREFIX}*"):
        match = re.match(rf"{PREFIX}(\d+)-", path.name)
        if match and not owner_alive(int(match.group(1))) and remove_tree(path, wait_s=1.0):
            removed += 1
    return removed


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
