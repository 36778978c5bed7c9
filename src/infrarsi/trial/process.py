"""Running a trial's launcher as an isolated process tree that always ends, and leaves nothing.

The launcher starts in its own session. Launchers such as torchrun start each rank in a session
of its own too, so killing a process group is not enough: every process of a trial carries the
trial's id in its environment, and the harness ends the launcher's descendants and then sweeps
for any process still carrying the id. While the trial runs, a sampler records the peak RSS of
each rank from outside.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from infrarsi.trial.watch import MetricsWatcher

TRIAL_ID_ENV = "INFRARSI_TRIAL_ID"
SAMPLE_PERIOD_S = 0.2
STALL_S = 5.0
STALL_CPU_FRACTION = 0.02  # below this share of one core over STALL_S, a rank is idle


@dataclass
class ProcessResult:
    """How the launcher ended: its exit code (None when killed) and what was seen from outside.

    ``stalled_at_cap`` is set when a rank sat at its memory capacity, nearly idle, for
    ``STALL_S`` seconds (a native allocation failure that deadlocked it); the trial was then
    ended early instead of waiting for the timeout.
    """
    returncode: int | None
    timed_out: bool
    wall_s: float
    outside_peak_rss_bytes: dict[int, int] = field(default_factory=dict)
    outside_peak_data_bytes: dict[int, int] = field(default_factory=dict)
    stalled_at_cap: str | None = None
    failed_node: int | None = None
    outside_train_span_s: float | None = None
    leftovers_killed: int = 0


def near_cap(data_bytes: int, cap_bytes: int) -> bool:
    """True when private memory is within one thread stack (or 5%) of the capacity."""
    return data_bytes >= cap_bytes - max(16 * 2**20, cap_bytes // 20)


class _RankSampler(threading.Thread):
    """Samples every rank under the launcher: peak RSS and private memory, and stalls at the cap."""

    def __init__(self, root_pids: list[int], mem_cap_bytes: int | None) -> None:
        super().__init__(daemon=True)
        self.root_pids = root_pids
        self.cap = mem_cap_bytes
        self.peaks: dict[int, int] = {}
        self.data_peaks: dict[int, int] = {}
        self.stalled: str | None = None
        self._ranks: dict[int, int | None] = {}
        self._progress: dict[int, tuple[float, float]] = {}  # pid -> (cpu s, window start)
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(SAMPLE_PERIOD_S):
            self._sample()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2)

    def _sample(self) -> None:
        children = []
        for pid in self.root_pids:
            try:
                children += psutil.Process(pid).children(recursive=True)
            except psutil.Error:
                continue
        for child in children:
            try:
                self._sample_one(child)
            except (psutil.Error, ValueError):
                continue

    def _sample_one(self, child: psutil.Process) -> None:
        if child.pid not in self._ranks:
            rank = child.environ().get("RANK")
            self._ranks[child.pid] = int(rank) if rank is not None else None
        rank = self._ranks[child.pid]
        if rank is None:
            return
        with child.oneshot():
            mem, cpu = child.memory_info(), sum(child.cpu_times()[:2])
        self.peaks[rank] = max(self.peaks.get(rank, 0), mem.rss)
        self.data_peaks[rank] = max(self.data_peaks.get(rank, 0), mem.data)
        now = time.monotonic()
        cpu0, t0 = self._progress.setdefault(child.pid, (cpu, now))
        if now - t0 < STALL_S:
            return
        idle = (cpu - cpu0) / (now - t0) < STALL_CPU_FRACTION
        if idle and self.cap and near_cap(mem.data, self.cap):
            self.stalled = (f"rank {rank} stalled for {now - t0:.0f} s with {mem.data} bytes "
                            f"of private memory at its capacity of {self.cap} bytes")
        self._progress[child.pid] = (cpu, now)


def run_isolated(commands: list[list[str]], cwd: Path, envs: list[dict[str, str]],
                 timeout_s: float, stdout: Path, stderr: Path, trial_id: str,
                 mem_cap_bytes: int | None = None,
                 watch: MetricsWatcher | None = None) -> ProcessResult:
    """Run one launcher per node to their end; no process of the trial survives this call.

    The trial ends when every launcher has exited, when one exits with an error (the others
    would wait forever for their peers, so they are ended), when a rank stalls at its memory
    capacity, or at the timeout. All launchers append to the same two log files.
    """
    t0 = time.monotonic()
    with open(stdout, "ab") as out, open(stderr, "ab") as err:
        procs = [subprocess.Popen(cmd, cwd=cwd, env={**env, TRIAL_ID_ENV: trial_id}, stdout=out,
                                  stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
                 for cmd, env in zip(commands, envs)]
        sampler = _RankSampler([p.pid for p in procs], mem_cap_bytes)
        sampler.start()
        if watch is not None:
            watch.start()
        try:
            failed = _wait(procs, sampler, t0, timeout_s)
        except BaseException:  # Ctrl-C or the tool being killed: never leave the trial behind
            kill_trial([p.pid for p in procs if p.poll() is None], trial_id)
            raise
        finally:
            sampler.stop()
            if watch is not None:
                watch.stop()
        running = [p.pid for p in procs if p.poll() is None]
        killed = kill_trial(running, trial_id)
        for proc in procs:
            proc.wait()
    ended = failed is not None or not running
    return ProcessResult(
        returncode=failed.returncode if failed is not None else (0 if ended else None),
        timed_out=not ended and sampler.stalled is None, wall_s=time.monotonic() - t0,
        outside_peak_rss_bytes=sampler.peaks, outside_peak_data_bytes=sampler.data_peaks,
        stalled_at_cap=None if ended else sampler.stalled,
        failed_node=procs.index(failed) if failed is not None and len(procs) > 1 else None,
        outside_train_span_s=max(watch.spans_s().values(), default=None) if watch else None,
        leftovers_killed=killed)


def _wait(procs: list[subprocess.Popen], sampler: "_RankSampler", t0: float,
          timeout_s: float) -> subprocess.Popen | None:
    """Poll until all exit, one fails (returned), a rank stalls at its cap, or the timeout."""
    while time.monotonic() - t0 < timeout_s and sampler.stalled is None:
        codes = [p.poll() for p in procs]
        failed = [p for p, code in zip(procs, codes) if code not in (None, 0)]
        if failed:
            return failed[0]
        if all(code == 0 for code in codes):
            return None
        time.sleep(0.05)
    return None


def trial_processes(trial_id: str) -> list[psutil.Process]:
    """Every live process whose environment carries this trial's id."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(TRIAL_ID_ENV) == trial_id:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
        except psutil.Error:
            continue
    return found


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
