"""Two moments of a trial the kernel tells the harness, which no code of the trial can move:
when a file a patch may touch is first opened (a patch's code cannot run before Python reads
it), and when the bytes under the final parameters' name last changed (training is over:
nothing after it is the workload's work). The span between them is the window in which a patch
can change what the run costs (``verify.clock``): before it runs only the workload's own
start-up (the launcher, the imports before the patch's module), after it only the tear-down.

The end is not "the last event named like the final file": a rank can write a placeholder
under that name early and put the real parameters in place later by a hard link (an
``IN_CREATE``), through a second name of the same inode, by renaming the folder, or through a
writable mapping. So the end is the latest of

- every event in the final file's folder, whatever its name (create, link, rename in or out,
  delete, attribute change, write, close after writing),
- every write, close-after-writing and attribute change of each inode that stood under the
  final name (watched by inode, so a write through another name or folder is seen),
- the final file's own change time (``st_ctime``, which the kernel sets and no process of
  the trial can set back) when the trial has ended.

A folder of the final parameters that is itself moved or deleted leaves the end unknown: the
window then runs to the exit. Events are timed by the harness's reader, which polls every
``POLL_S``: a first open at the start of the interval in which its read delivered it (the
earliest it can have happened), an end at the interval's end (the latest); the largest such
interval of the two moments is said (``Moments.lag_s``), so a reader scheduled late widens the
window, never narrows it.

Linux ``inotify`` through ``ctypes``: watches are inode watches, so opens through a rank's own
mount namespace (the trial's folder bound back) are seen. Where inotify cannot be had the
watch records nothing and the window falls back to launch and exit.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from infrarsi.trial.evaluation import weights_dir
from infrarsi.trial.patching import matches

if TYPE_CHECKING:
    from infrarsi.trial.spec import TrialSpec

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE, IN_OPEN = 0x002, 0x004, 0x008, 0x020
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x040, 0x080, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF = 0x400, 0x800
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
# what can put other bytes under a name in the folder, or change the folder itself
FOLDER_MASK = (
    IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
)
FOLDER_GONE = IN_DELETE_SELF | IN_MOVE_SELF
# what can change an inode that stood under the final name, through whichever name
INODE_MASK = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then the name, len bytes)
WATCHED_MAX = 256  # files watched for their first open, at most
POLL_S = 0.02  # the reader reads at least this often: the bound on how late it times an event
FOLDER, INODE = "\0folder", "\0inode"  # the two kinds of watch on the final parameters


@dataclass
class Moments:
    """Seconds from the watch's start: the first open of each watched file (by its path
    relative to the workspace), the end of the final parameters (the latest moment their bytes
    can have changed), and how far apart the reader's reads around those moments were (the
    most the harness's timing of them can be off)."""

    first_open_s: dict[str, float] = field(default_factory=dict)
    final_saved_s: float | None = None
    lag_s: float = 0.0
    problem: str | None = None


class FileWatch:
    """Watches ``files`` (absolute paths under ``root``) for their first open and ``final``
    for the last change of what stands under its name, from ``start`` to ``stop``;
    ``moments`` after ``stop``."""

    def __init__(self, root: Path, files: list[Path], final: Path | None) -> None:
        self.root, self.final = Path(root), final
        self.files = [Path(f) for f in files if Path(f).is_file()][:WATCHED_MAX]
        self.moments = Moments()
        self._fd = -1
        self._wds: dict[int, str] = {}  # watch descriptor -> relative path, FOLDER or INODE
        self._libc: ctypes.CDLL | None = None
        self._folder_gone = False
        self._halt = threading.Event()
        self._wake_r, self._wake_w = -1, -1  # a pipe that wakes the reader when it is stopped
        self._thread: threading.Thread | None = None
        self.t0, self._wall0_ns = time.monotonic(), time.time_ns()
        self._read_at = self.t0  # when the last read of the queue began

    def start(self) -> None:
        """Set the watches (before the launch) and read events in a thread of their own."""
        self.t0, self._wall0_ns = time.monotonic(), time.time_ns()
        self._read_at = self.t0
        try:
            self._libc = ctypes.CDLL(None, use_errno=True)
            self._fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if self._fd < 0:
                raise OSError(ctypes.get_errno(), "inotify_init1")
            for path in self.files:
                self._add(path, IN_OPEN, path.relative_to(self.root).as_posix())
            if self.final is not None and self.final.parent.is_dir():
                self._add(self.final.parent, FOLDER_MASK | FOLDER_GONE, FOLDER)
                self._watch_final_inode()
        except (OSError, AttributeError) as exc:
            self.moments.problem = f"inotify unavailable: {exc}"
            self._close()
            return
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def stop(self) -> Moments:
        """Read what is left, close the watch, take the final file's own change time; the
        moments seen."""
        self._halt.set()
        if self._wake_w >= 0:
            os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._drain()
        self._close()
        self._settle_end()
        return self.moments

    def _add(self, path: Path, mask: int, what: str) -> None:
        assert self._libc is not None
        wd = self._libc.inotify_add_watch(self._fd, str(path).encode(), mask)
        if wd >= 0:
            self._wds[wd] = what

    def _watch_final_inode(self) -> None:
        """Watch the inode under the final name now (each one that stands there in turn)."""
        if self.final is not None and self._fd >= 0 and os.path.lexists(self.final):
            self._add(self.final, INODE_MASK, INODE)

    def _read(self) -> None:
        while not self._halt.is_set():
            ready, _, _ = select.select([self._fd, self._wake_r], [], [], POLL_S)
            if self._halt.is_set():
                return
            self._drain()

    def _drain(self) -> None:
        """Read the queue: what it holds happened after the previous read began (``since``)
        and before this one returned (``until``)."""
        if self._fd < 0:
            return
        since, self._read_at = self._read_at, time.monotonic()
        try:
            data = os.read(self._fd, 65536)
        except (BlockingIOError, OSError):
            return
        until = time.monotonic()
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _, size = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + size].split(b"\0")[0]
            offset += _EVENT.size + size
            self._note(wd, mask, name.decode(errors="replace"), since, until)

    def _note(self, wd: int, mask: int, name: str, since: float, until: float) -> None:
        where = self._wds.get(wd)
        if where is None:
            return
        if where not in (FOLDER, INODE):
            if mask & IN_OPEN and where not in self.moments.first_open_s:
                self.moments.first_open_s[where] = since - self.t0  # the earliest it can be
                self._lag(until - since)
            return
        if where == FOLDER and mask & FOLDER_GONE:
            self._folder_gone = True
            return
        if mask & (FOLDER_MASK if where == FOLDER else INODE_MASK):
            self.moments.final_saved_s = until - self.t0  # the latest it can be
            self._lag(until - since)
            if where == FOLDER and self.final is not None and name == self.final.name:
                self._watch_final_inode()

    def _lag(self, seconds: float) -> None:
        self.moments.lag_s = max(self.moments.lag_s, seconds)

    def _settle_end(self) -> None:
        """The end as the kernel left it: the latest of the events seen and the change time of
        what stands under the final name (and of the link itself, if it is one); unknown (the
        exit) where the final file's folder was moved or deleted."""
        if self.final is None or self.moments.problem:
            return
        if self._folder_gone:
            self.moments.final_saved_s = None
            self.moments.problem = (
                "the folder of the final parameters was moved or deleted during the trial: "
                "the window runs to the exit"
            )
            return
        changed = []
        for stat in (os.stat, os.lstat):
            try:
                changed.append((stat(self.final).st_ctime_ns - self._wall0_ns) / 1e9)
            except OSError:
                pass
        ends = [t for t in changed if t > 0]
        if self.moments.final_saved_s is not None:
            ends.append(self.moments.final_saved_s)
        self.moments.final_saved_s = max(ends) if ends else None

    def _close(self) -> None:
        for fd in (self._fd, self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._fd = self._wake_r = self._wake_w = -1


def for_trial(
    spec: TrialSpec, trial_dir: Path, workspace: Path, patched: list[list[str]]
) -> FileWatch:
    """The kernel's watch on the files a patch may touch (every editable file, and whatever
    the patches touch) and on where the final parameters are written."""
    editable = spec.manifest.files.editable
    rels = {p for paths in patched for p in paths}
    rels |= {
        f.relative_to(workspace).as_posix()
        for f in sorted(workspace.rglob("*"))
        if f.is_file() and matches(f.relative_to(workspace).as_posix(), editable)
    }
    how = spec.manifest.evaluation
    final = None
    if how is not None and how.final_weights:
        weights_dir(trial_dir).mkdir(parents=True, exist_ok=True)
        final = workspace / how.final_weights.format(weights_dir=weights_dir(trial_dir))
    return FileWatch(workspace, [workspace / r for r in sorted(rels)], final)
