"""Two moments of a trial the kernel tells the harness, which no code of the trial can move:
when a file a patch may touch is first opened (a patch's code cannot run before Python reads
it), and when the final parameters are last written (training is over: nothing after it is
the workload's work). The span between them is the window in which a patch can change what
the run costs (``verify.clock``): before it runs only the workload's own start-up (the
launcher, the imports before the patch's module), after it only the tear-down.

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

IN_OPEN, IN_CLOSE_WRITE, IN_MOVED_TO = 0x20, 0x08, 0x80
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then the name, len bytes)
WATCHED_MAX = 256  # files watched for their first open, at most


@dataclass
class Moments:
    """Seconds from the watch's start: the first open of each watched file (by its path
    relative to the workspace) and the last write of the final parameters."""

    first_open_s: dict[str, float] = field(default_factory=dict)
    final_saved_s: float | None = None
    problem: str | None = None


class FileWatch:
    """Watches ``files`` (absolute paths under ``root``) for their first open and ``final``
    for its last write, from ``start`` to ``stop``; ``moments`` after ``stop``."""

    def __init__(self, root: Path, files: list[Path], final: Path | None) -> None:
        self.root, self.final = Path(root), final
        self.files = [Path(f) for f in files if Path(f).is_file()][:WATCHED_MAX]
        self.moments = Moments()
        self._fd = -1
        self._wds: dict[int, str] = {}  # watch descriptor -> relative path, or "" for final's dir
        self._halt = threading.Event()
        self._wake_r, self._wake_w = -1, -1  # a pipe that wakes the reader when it is stopped
        self._thread: threading.Thread | None = None
        self.t0 = time.monotonic()

    def start(self) -> None:
        """Set the watches (before the launch) and read events in a thread of their own."""
        self.t0 = time.monotonic()
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            self._fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if self._fd < 0:
                raise OSError(ctypes.get_errno(), "inotify_init1")
            for path in self.files:
                wd = libc.inotify_add_watch(self._fd, str(path).encode(), IN_OPEN)
                if wd >= 0:
                    self._wds[wd] = path.relative_to(self.root).as_posix()
            if self.final is not None and self.final.parent.is_dir():
                mask = IN_CLOSE_WRITE | IN_MOVED_TO
                wd = libc.inotify_add_watch(self._fd, str(self.final.parent).encode(), mask)
                if wd >= 0:
                    self._wds[wd] = ""
        except (OSError, AttributeError) as exc:
            self.moments.problem = f"inotify unavailable: {exc}"
            self._close()
            return
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def stop(self) -> Moments:
        """Read what is left, close the watch; the moments seen."""
        self._halt.set()
        if self._wake_w >= 0:
            os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._drain(time.monotonic() - self.t0)
        self._close()
        return self.moments

    def _read(self) -> None:
        while not self._halt.is_set():
            ready, _, _ = select.select([self._fd, self._wake_r], [], [], 1.0)
            if self._fd in ready:
                self._drain(time.monotonic() - self.t0)

    def _drain(self, now: float) -> None:
        if self._fd < 0:
            return
        try:
            data = os.read(self._fd, 65536)
        except (BlockingIOError, OSError):
            return
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _, size = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + size].split(b"\0")[0]
            offset += _EVENT.size + size
            self._note(wd, mask, name.decode(errors="replace"), now)

    def _note(self, wd: int, mask: int, name: str, now: float) -> None:
        where = self._wds.get(wd)
        if where is None:
            return
        if where and mask & IN_OPEN:
            self.moments.first_open_s.setdefault(where, now)
        elif not where and self.final is not None and name == self.final.name:
            self.moments.final_saved_s = now  # the last write counts

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
