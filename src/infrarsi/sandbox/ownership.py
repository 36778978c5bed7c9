"""The harness owns every process a trial starts: each launcher runs under an init of the
trial's own (``_hooks/infrarsi_init.py``) in a PID namespace, and, where the trial runs on this
host alone, a network namespace with loopback up. As root the harness makes them itself; not
root, a user namespace of the trial's own makes them (the user mapped to root inside it, where
the kernel allows an ordinary user one, as most do); where neither can be had, the init is the
trial's child subreaper (every orphan of the trial is handed to it), which still finds, counts
and kills what outlives the launcher, but the trial keeps the host's network.

A process of the trial cannot leave it: leaving the session, renaming itself or its trial id,
double-forking — it is still in the namespace, and when the launcher exits the init waits a
short tail (``OUTLIVE_TAIL_S``) for the namespace to empty, kills what is left, and says how many
there were. A trial with such survivors is ``invalid`` (work done outside the launch that the
harness times), and its evidence is read only once the namespace is empty. Trials cannot reach
each other: no shared abstract socket, no shared port. The launchers of one trial on local
nodes share one network namespace (their rendezvous); a trial whose launchers are on other
hosts keeps the hosts' network, and its record says so.

``INFRARSI_OWNERSHIP`` (``user`` or ``subreaper``) makes the harness use that way even where a
stronger one is at hand: for an operator whose kernel misbehaves with one, and for the tests
that show each way as root.
"""

from __future__ import annotations

import functools
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

INIT_SCRIPT = Path(__file__).resolve().parent / "_hooks" / "infrarsi_init.py"  # sandbox/_hooks
OUTLIVE_TAIL_S = 1.0  # the ranks have ended when the launcher does; anything later is not theirs
READY_TIMEOUT_S = 30.0
MODE_ENV = "INFRARSI_OWNERSHIP"
ROOT, USER, SUBREAPER = "root", "user", "subreaper"
_PROBE = (
    "import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x10000000 | 0x20000000 | 0x40000000)"
    " != 0)"
)


def mode() -> str:
    """How this harness owns a trial's processes: ``root`` (namespaces of its own), ``user``
    (namespaces inside a user namespace, not root) or ``subreaper`` (no namespace to be had)."""
    forced = os.environ.get(MODE_ENV, "")
    if forced in (USER, SUBREAPER):
        return forced
    if os.geteuid() == 0:
        return ROOT
    return USER if _user_namespaces_allowed() else SUBREAPER


@functools.cache
def _user_namespaces_allowed() -> bool:
    """Whether the kernel gives this user a user namespace with a PID and a network namespace
    in it (asked once, of a child process)."""
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _PROBE], timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def why_no_namespace() -> str:
    """Why a trial gets no namespace here (``available()`` false)."""
    if os.environ.get(MODE_ENV) == SUBREAPER:
        return f"{MODE_ENV}={SUBREAPER} asks for none"
    return "not root, and the kernel gives this user no user namespace"


def available() -> bool:
    """Whether this harness can give a trial namespaces of its own (as root, or in a user
    namespace): its PID and network namespaces, and each rank's mount namespace."""
    return mode() in (ROOT, USER)


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
            mode(),
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
    """What the record says about who owned the trial's processes: it starts ``pid
    namespace`` or ``subreaper`` where the harness owned them (``off: ...`` where an init did
    not start)."""
    off = [i.ready for i in inits if not i.ready.startswith(("pid", "subreaper"))]
    if off:
        return off[0]
    reaped = [i.ready for i in inits if i.ready.startswith("subreaper")]
    if reaped:
        why = reaped[0].partition(": ")[2]
        return "subreaper" + (f" (no namespace: {why})" if why else "") + "; host network"
    in_user = bool(inits) and inits[0].ready.endswith(" user")
    pid = "pid namespace" + (" in a user namespace" if in_user else "")
    if spans_hosts:
        return f"{pid}; host network (the trial's launchers are on several hosts)"
    shared = " shared by its local launchers" if len(inits) > 1 else ""
    return f"{pid}; network namespace of its own{shared}"


def owns(summary_text: str) -> bool:
    """Whether a record's ownership line says the harness owned every process of the trial
    (no process could outlive it unnoticed)."""
    return summary_text.startswith(("pid", "subreaper"))


def networks(count: int, spans_hosts: bool) -> list[Init]:
    """One init per local launcher: the first makes the trial's network, the others join it
    (``join:`` is completed with the first one's pid once it runs)."""
    if spans_hosts:
        return [Init("host") for _ in range(count)]
    return [Init("own")] + [Init("join:") for _ in range(count - 1)]
