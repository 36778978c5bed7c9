"""The harness owns every process a trial starts: each launcher runs under an init of the
trial's own (``_hooks/infrarsi_init.py``) in a PID namespace, and, where the trial runs on this
host alone, a network namespace with loopback up.

A process of the trial cannot leave it: leaving the session, renaming itself or its trial id,
double-forking — it is still in the namespace, and when the launcher exits the init waits a
short tail (``OUTLIVE_TAIL_S``) for the namespace to empty, kills what is left, and says how many
there were. A trial with such survivors is ``invalid`` (work done outside the launch that the
harness times), and its evidence is read only once the namespace is empty. Trials cannot reach
each other: no shared abstract socket, no shared port. The launchers of one trial on local
nodes share one network namespace (their rendezvous); a trial whose launchers are on other
hosts keeps the hosts' network, and its record says so. Not root: nothing of this is done, and
the record says why.
"""

from __future__ import annotations

import os
import select
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

INIT_SCRIPT = Path(__file__).resolve().parent / "_hooks" / "infrarsi_init.py"
OUTLIVE_TAIL_S = 1.0  # the ranks have ended when the launcher does; anything later is not theirs
READY_TIMEOUT_S = 30.0
NOT_ROOT = (
    "off: not root (a PID and a network namespace need it; the trial's processes are found "
    "by their trial id only)"
)


def available() -> bool:
    """Whether this harness can give a trial namespaces of its own (it runs as root)."""
    return os.geteuid() == 0


@dataclass
class Init:
    """The init of one local launcher: the command that starts it, then what it said."""

    net: str  # "own", "join:<pid>" or "host"
    read_fd: int = -1
    ready: str = ""
    said: list[str] = field(default_factory=list)

    def command(self, launcher: list[str]) -> tuple[list[str], int]:
        """The command that runs ``launcher`` under the init, and the status pipe's write end
        (to pass to the child, then close here)."""
        self.read_fd, write_fd = os.pipe()
        wrapped = [
            sys.executable,
            "-I",
            "-S",
            str(INIT_SCRIPT),
            str(write_fd),
            f"{OUTLIVE_TAIL_S:g}",
            self.net,
            "--",
            *launcher,
        ]
        return wrapped, write_fd

    def started(self, write_fd: int) -> None:
        """After the child started: close the write end here, wait for its ``ready`` line (a
        later launcher may join this one's network only once it exists)."""
        os.close(write_fd)
        lines = _lines(self.read_fd, READY_TIMEOUT_S, until="ready")
        self.said += lines
        ready = [line for line in lines if line.startswith("ready ")]
        self.ready = ready[0][len("ready ") :] if ready else "off: the trial's init did not start"

    def survivors(self) -> int:
        """After the launcher ended: how many processes outlived it (0 when unknown)."""
        if self.read_fd < 0:
            return 0
        self.said += _lines(self.read_fd, 5.0)
        os.close(self.read_fd)
        self.read_fd = -1
        counts = [int(line.split()[1]) for line in self.said if line.startswith("survivors ")]
        return counts[0] if counts else 0

    def close(self) -> None:
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1


def _lines(fd: int, timeout_s: float, until: str | None = None) -> list[str]:
    """Lines from ``fd`` until EOF (or a line starting with ``until``), at most ``timeout_s``."""
    data, deadline = b"", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
        if until is not None and any(
            line.startswith(until.encode()) for line in data.split(b"\n")[:-1]
        ):
            break
    return [line for line in data.decode(errors="replace").splitlines() if line]


def summary(inits: list[Init], spans_hosts: bool) -> str:
    """What the record says about who owned the trial's processes."""
    if not available():
        return NOT_ROOT
    off = [i.ready for i in inits if not i.ready.startswith("pid")]
    if off:
        return off[0]
    if spans_hosts:
        return "pid namespace; host network (the trial's launchers are on several hosts)"
    shared = " shared by its local launchers" if len(inits) > 1 else ""
    return f"pid namespace; network namespace of its own{shared}"


def networks(count: int, spans_hosts: bool) -> list[Init]:
    """One init per local launcher: the first makes the trial's network, the others join it
    (``join:`` is completed with the first one's pid once it runs)."""
    if spans_hosts:
        return [Init("host") for _ in range(count)]
    return [Init("own")] + [Init("join:") for _ in range(count - 1)]
