"""Running a trial's launcher as an isolated process tree that always ends, and leaves nothing.

The launcher starts in its own session. Launchers such as torchrun start each rank in a session
of its own too, so killing a process group is not enough: every process of a trial carries the
trial's id and its owner (the harness process) in its environment, and the harness ends the
launcher's descendants and then sweeps for any process still carrying the id. Every launcher is
started with a parent-death signal (and every rank sets its own, see the bootstrap hook), so a
trial dies with the tool even when the tool is killed with SIGKILL; whatever still survives is
swept by :func:`sweep_orphans` before the next trial starts. While the trial runs, a sampler
records each rank's peak RSS from outside (the figure used where no memory cgroup exists).
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from infrarsi.sandbox import ownership

TRIAL_ID_ENV = "INFRARSI_TRIAL_ID"
OWNER_ENV = "INFRARSI_TRIAL_OWNER"  # "<pid>:<start time>" of the harness process that owns it
SAMPLE_PERIOD_S = 0.2
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


class LineSink(Protocol):
    """What receives the launchers' output lines as they arrive (a trial's metrics channel):
    started before the first launcher, stopped after every process ended."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def stdout_line(self, line: bytes, stream: str = "stdout") -> None: ...


@dataclass
class ProcessResult:
    """How the launcher ended: its exit code (None when killed) and what was seen from outside."""

    returncode: int | None
    timed_out: bool
    wall_s: float
    outside_peak_rss_bytes: dict[int, int] = field(default_factory=dict)
    failed_node: int | None = None
    outside_other_peak_rss_bytes: int = 0  # the launchers and any other non-rank process
    leftovers_killed: int = 0
    outlived: int = 0  # processes of the trial still alive a tail after their launcher exited
    ownership: str = ""  # who owned the trial's processes (``ownership.summary``)


class _RankSampler(threading.Thread):
    """Samples the peak RSS of every rank under the launchers (ranks known by their RANK)."""

    def __init__(self, root_pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.root_pids = root_pids
        self.peaks: dict[int, int] = {}
        self.other_peak = 0  # the largest sum of RSS over the trial's non-rank processes
        self._ranks: dict[int, int | None] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(SAMPLE_PERIOD_S):
            self._sample()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2)

    def _sample(self) -> None:
        procs = []
        for pid in self.root_pids:
            try:
                root = psutil.Process(pid)
                procs += [root] + root.children(recursive=True)
            except psutil.Error:
                continue
        other = 0
        for proc in procs:
            try:
                other += self._sample_one(proc)
            except (psutil.Error, ValueError):
                continue
        self.other_peak = max(self.other_peak, other)

    def _sample_one(self, child: psutil.Process) -> int:
        """Note a rank's RSS; return a non-rank process's RSS (0 for a rank)."""
        if child.pid not in self._ranks:
            env = child.environ()
            named = env.get("RANK", "0" if env.get("INFRARSI_CAP_SELF") == "1" else None)
            self._ranks[child.pid] = int(named) if named is not None else None
        rank = self._ranks[child.pid]
        rss = child.memory_info().rss
        if rank is None:
            return rss
        if rss > 0:
            self.peaks[rank] = max(self.peaks.get(rank, 0), rss)
        return 0


def owner_tag(pid: int | None = None) -> str:
    """``<pid>:<start time>`` of a process: the owner mark a trial's processes carry."""
    proc = psutil.Process(pid or os.getpid())
    return f"{proc.pid}:{proc.create_time():.2f}"


def owner_alive(tag_or_pid: str | int) -> bool:
    """True when the owning harness process (by tag, or by pid alone) is still running."""
    pid, _, created = str(tag_or_pid).partition(":")
    try:
        proc = psutil.Process(int(pid))
        return not created or f"{proc.create_time():.2f}" == created
    except (psutil.Error, ValueError):
        return False


def _die_with_parent() -> None:  # runs in the child between fork and exec
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _launcher_setup(cgroup_procs: Path | None):
    """What a launcher does between fork and exec: die with the harness, and join the trial's
    launchers cgroup (so what it holds is accounted)."""

    def setup() -> None:
        _die_with_parent()
        if cgroup_procs is not None:
            with open(cgroup_procs, "w") as f:
                f.write("0")

    return setup


@dataclass(frozen=True, kw_only=True)
class Launchers:
    """What one trial launches: a command and an environment per node, run in ``cwd``;
    ``remote``: launcher index -> a function (command, env) starting it on another host
    (``sandbox.remote``)."""

    commands: list[list[str]]
    envs: list[dict[str, str]]
    cwd: Path
    remote: dict[int, Callable] = field(default_factory=dict)
    # the trial's other launchers are on other hosts (this one is one of them): it keeps the
    # host's network, which its peers reach it through
    spans_hosts: bool = False
    # the local launchers' standard error goes to the channel too, line by line (a script
    # that logs its steps with Python's logging, whose default stream it is)
    read_stderr: bool = False


def run_isolated(
    launchers: Launchers,
    *,
    trial_id: str,
    timeout_s: float,
    logs: tuple[Path, Path],
    channel: LineSink | None = None,
    cgroup_procs: Path | None = None,
) -> ProcessResult:
    """Run one launcher per node to their end; no process of the trial survives this call.

    The trial ends when every launcher has exited, when one exits with an error (the others
    would wait forever for their peers, so they are ended), or at the timeout. The launchers'
    standard output is a pipe the harness reads (each line to ``channel`` as it arrives, and
    to the ``stdout`` log of ``logs``); their standard error goes to its ``stderr`` log. Call
    it from a thread that outlives the trial (the parent-death signal follows the thread that
    started the launcher). A remote launcher is polled, waited for and stopped like a local one.
    """
    t0 = time.monotonic()
    if channel is not None:
        channel.start()
    with open(logs[0], "ab") as out, open(logs[1], "ab") as err:
        spans_hosts = bool(launchers.remote) or launchers.spans_hosts
        inits = ownership.networks(len(launchers.commands), spans_hosts)
        procs = _start_all(launchers, trial_id, err, cgroup_procs, inits)
        local = [p for p in procs if p.pid is not None]
        pumps = [_Pump(proc.stdout, out, channel) for proc in local]
        if launchers.read_stderr:
            pumps += [_Pump(proc.stderr, err, channel, "stderr") for proc in local]
        sampler = _RankSampler([p.pid for p in local])
        failed = _waited(procs, inits, sampler, trial_id, (t0, timeout_s))
        running = [p for p in procs if p.poll() is None]
        killed = _end(running, trial_id)
        for proc in procs:
            proc.wait()
        wall_s = time.monotonic() - t0
        outlived = _closed(inits, pumps, count=not running)
        if channel is not None:
            channel.stop()
    ended = failed is not None or not running
    return ProcessResult(
        returncode=failed.returncode if failed is not None else (0 if ended else None),
        timed_out=not ended,
        wall_s=wall_s,
        outside_peak_rss_bytes=sampler.peaks,
        outside_other_peak_rss_bytes=sampler.other_peak,
        failed_node=procs.index(failed) if failed is not None and len(procs) > 1 else None,
        leftovers_killed=killed,
        outlived=outlived,
        ownership=ownership.summary([i for i in inits if i.ready], spans_hosts),
    )


def _waited(
    procs: list[subprocess.Popen],
    inits: list,
    sampler: _RankSampler,
    trial_id: str,
    clock: tuple[float, float],
) -> subprocess.Popen | None:
    """``_wait`` for the launchers (``clock``: their start, the timeout) while ``sampler``
    samples their ranks; the launcher that failed, if one did. Interrupted (Ctrl-C, the tool
    killed), it ends the trial's processes and closes their namespaces' inits first: no trial
    is left behind."""
    sampler.start()
    try:
        return _wait(procs, *clock)
    except BaseException:
        _end(procs, trial_id)
        for init in inits:
            init.close()
        raise
    finally:
        sampler.stop()


def _closed(inits: list, pumps: list[_Pump], count: bool) -> int:
    """After the launchers: how many processes outlived them (asked of each init when
    ``count``), the inits closed, the output pumps drained."""
    outlived = sum(init.survivors() for init in inits) if count else 0
    for init in inits:
        init.close()
    for pump in pumps:
        pump.join(timeout=5)
    return outlived


def _start_all(
    launchers: Launchers, trial_id: str, err, cgroup_procs: Path | None, inits: list
) -> list:
    """Start every launcher, each tagged with the trial's id and its owner: a remote one
    through its starter, a local one under its init (standard error to ``err``, or a pipe
    where the channel reads it)."""
    tags = {TRIAL_ID_ENV: trial_id, OWNER_ENV: owner_tag()}
    procs: list = []
    for i, (cmd, env) in enumerate(zip(launchers.commands, launchers.envs)):
        if i in launchers.remote:
            procs.append(launchers.remote[i](cmd, {**env, **tags}))
            continue
        stream = subprocess.PIPE if launchers.read_stderr else err
        procs.append(
            _start_local(cmd, {**env, **tags}, launchers.cwd, stream, cgroup_procs, inits, procs)
        )
    return procs


def _start_local(
    command: list[str],
    env: dict[str, str],
    cwd: Path,
    err,
    cgroup_procs: Path | None,
    inits: list[ownership.Init],
    started: list,
) -> subprocess.Popen:
    """Start one launcher on this host under its init (a later local launcher joins the first
    one's network; ``ownership`` says how the init owns the trial's processes)."""
    init = inits[len(started)]
    if init.net == "join:":
        init.net = f"join:{next(p.pid for p in started if p.pid is not None)}"
    command, write_fd = init.command(command)
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=err,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_launcher_setup(cgroup_procs),
        pass_fds=(write_fd,),
    )
    init.started(write_fd)
    return proc


def _end(procs: list, trial_id: str) -> int:
    """End the launchers still running: local ones and their trial's processes here, remote
    ones on their hosts; how many local processes were still live."""
    for proc in procs:
        if proc.pid is None and proc.poll() is None:
            proc.stop()
    return kill_trial([p.pid for p in procs if p.pid is not None and p.poll() is None], trial_id)


_LINE = re.compile(rb"[^\r\n]*[\r\n]")


def line_parts(buffer: bytes) -> tuple[list[bytes], bytes]:
    """The complete lines of ``buffer`` and what is left of it: a line ends at a newline or at
    a carriage return (a progress bar rewrites its line with ``\\r``: each rewrite is a line of
    its own, read when it is written, not when the bar ends), each kept with its end."""
    parts = _LINE.findall(buffer)
    return parts, buffer[sum(map(len, parts)) :]


class _Pump(threading.Thread):
    """Copies one launcher's standard output (or error), line by line as it arrives, to the
    log and the channel (a line ends at ``\\n`` or ``\\r``: ``line_parts``)."""

    _log_lock = threading.Lock()

    def __init__(self, pipe, log, channel: LineSink | None, stream: str = "stdout") -> None:
        super().__init__(daemon=True)
        self.pipe, self.log, self.channel, self.stream = pipe, log, channel, stream
        self.start()

    def run(self) -> None:
        fd, left = self.pipe.fileno(), b""
        while chunk := os.read(fd, 65536):
            parts, left = line_parts(left + chunk)
            self._deliver(parts)
        self._deliver([left] if left else [])
        self.pipe.close()

    def _deliver(self, parts: list[bytes]) -> None:
        for part in parts:
            if self.channel is not None:
                self.channel.stdout_line(part, self.stream)
        if parts:
            with self._log_lock:
                self.log.write(b"".join(parts))
                self.log.flush()


def _wait(procs: list[subprocess.Popen], t0: float, timeout_s: float) -> subprocess.Popen | None:
    """Poll until all exit, one fails (returned), or the timeout."""
    while time.monotonic() - t0 < timeout_s:
        codes = [p.poll() for p in procs]
        failed = [p for p, code in zip(procs, codes) if code not in (None, 0)]
        if failed:
            return failed[0]
        if all(code == 0 for code in codes):
            return None
        time.sleep(0.05)
    return None


def trial_processes(trial_id: str | None = None) -> list[psutil.Process]:
    """Every live process whose environment carries this trial's id (any trial's when None)."""
    found = []
    for proc in psutil.process_iter():
        try:
            tag = proc.environ().get(TRIAL_ID_ENV) if proc.pid != os.getpid() else None
            if (
                tag is not None
                and (trial_id is None or tag == trial_id)
                and proc.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def sweep_orphans() -> int:
    """Kill every trial process whose owning harness is gone (a tool killed mid-trial); how
    many were still live. Trials of other running tools are left alone."""
    orphans = []
    for proc in trial_processes():
        try:
            owner = proc.environ().get(OWNER_ENV)
        except psutil.Error:
            continue
        if owner is None or not owner_alive(owner):
            orphans.append(proc)
    for proc in orphans:
        _signal(proc, signal.SIGKILL)
    psutil.wait_procs(orphans, timeout=3)
    return len(orphans)


def kill_trial(root_pids: list[int], trial_id: str, grace_s: float = 3.0) -> int:
    """End the launchers not yet reaped, their descendants and any stray process of the trial;
    returns how many were still live."""
    procs: dict[int, psutil.Process] = {}
    for pid in root_pids:
        try:
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                procs[proc.pid] = proc
        except psutil.Error:
            continue
    for proc in trial_processes(trial_id):
        procs.setdefault(proc.pid, proc)
    live = [p for p in procs.values() if _alive(p)]
    for proc in live:
        _signal(proc, signal.SIGTERM)
    _, still = psutil.wait_procs(live, timeout=grace_s)
    for proc in still:
        _signal(proc, signal.SIGKILL)
    psutil.wait_procs(still, timeout=grace_s)
    return len(live)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(proc: psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except psutil.Error:
        pass
