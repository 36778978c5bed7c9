"""Launchers of one trial that run on other hosts: what the trial runner needs of them, and what
the other host does with one. The runner imports no cluster library: an executor that spreads a
multi-launcher workload over nodes (the Ray executor) gives the trial an ``Elsewhere``.

The trial's first launcher runs where the trial runner runs (its rendezvous host, its metrics
channel, its memory cgroups); each other launcher is started on its own host by
``run_launcher``, with the same isolation, memory cgroups and parent-death rules as a local one,
in a folder of its own (the coordinator's paths in its command and environment rewritten to
it). What its ranks wrote in their trial folder (error reports, weights), their memory peaks,
and its output come back in a ``RemoteOutcome`` and join the trial's as if they ran here.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from infrarsi.trial import memcg
from infrarsi.trial.process import Launchers, owner_alive, run_isolated

SKIP = ("workspace", "tmp", "cache", "home", "stdout.log", "stderr.log")  # not sent back


@dataclass
class RemoteOutcome:
    """How a launcher on another host ended, and what its ranks left."""

    node: str
    returncode: int | None
    timed_out: bool
    memory: dict[int, tuple[int, int]] = field(default_factory=dict)  # rank -> (peak, kills)
    peak_rss_bytes: dict[int, int] = field(default_factory=dict)  # seen from outside
    stdout: bytes = b""
    stderr: bytes = b""
    files: bytes = b""  # a tar of what the ranks wrote in their trial folder

    def rank_memory(self) -> dict[int, memcg.RankMemory]:
        return {
            rank: memcg.RankMemory(peak_bytes=peak, oom_kills=kills)
            for rank, (peak, kills) in self.memory.items()
        }

    def unpack(self, trial_dir: Path) -> None:
        """The ranks' files into the trial's folder; their output appended to its logs."""
        if self.files:
            with tarfile.open(fileobj=io.BytesIO(self.files)) as archive:
                archive.extractall(trial_dir, filter="data")
        for name, data in (("stdout.log", self.stdout), ("stderr.log", self.stderr)):
            with open(trial_dir / name, "ab") as log:
                log.write(data)


class RemoteLauncher(Protocol):
    """A launcher running on another host, as ``run_isolated`` drives it (no local pid)."""

    pid: None
    stdout: None

    def poll(self) -> int | None: ...
    def wait(self) -> int | None: ...
    def stop(self) -> None: ...
    def outcome(self) -> RemoteOutcome: ...


class Elsewhere(Protocol):
    """Where a trial's launchers after the first run: one host per launcher."""

    def host(self) -> str:
        """This host's address, reachable from the others (rendezvous and metrics)."""

    def node(self) -> str:
        """This host's name in the cluster (the record's ``launcher_nodes``)."""

    def start(
        self,
        node_rank: int,
        command: list[str],
        env: dict[str, str],
        workspace: bytes,
        trial_dir: str,
        trial_id: str,
        timeout_s: float,
    ) -> RemoteLauncher:
        """Start launcher ``node_rank`` on its host."""


def pack_workspace(workspace: Path) -> bytes:
    """The trial's patched workspace, as the other hosts unpack it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", dereference=True) as archive:
        archive.add(workspace, arcname="workspace")
    return out.getvalue()


def run_launcher(
    node: str,
    command: list[str],
    env: dict[str, str],
    workspace: bytes,
    trial_dir: str,
    trial_id: str,
    timeout_s: float,
) -> RemoteOutcome:
    """On the other host: unpack the workspace into a folder of its own, rewrite the
    coordinator's paths to it, run the launcher to its end (memory cgroups, parent-death rules,
    the timeout), and pack what its ranks wrote."""
    scratch = Path(tempfile.mkdtemp(prefix="infrarsi-launcher-"))
    here = scratch / trial_id
    here.mkdir()
    with tarfile.open(fileobj=io.BytesIO(workspace)) as archive:
        archive.extractall(here, filter="data")
    there = str(Path(trial_dir).parent)
    command = [part.replace(there, str(scratch)) for part in command]
    env = {k: v.replace(there, str(scratch)) for k, v in env.items()}
    for name in ("home", "cache", "tmp"):
        (here / name).mkdir(exist_ok=True)
    with memcg.trial_cgroup(trial_id, owner_alive) as cgroup:
        env.update(cgroup.env() if cgroup else {})
        result = run_isolated(
            Launchers(commands=[command], envs=[env], cwd=here / "workspace", spans_hosts=True),
            trial_id=trial_id,
            timeout_s=timeout_s,
            logs=(here / "stdout.log", here / "stderr.log"),
            cgroup_procs=cgroup.launchers_procs if cgroup else None,
        )
        memory = (
            {r: (m.peak_bytes, m.oom_kills) for r, m in cgroup.ranks().items()} if cgroup else {}
        )
    try:
        return RemoteOutcome(
            node=node,
            returncode=result.returncode,
            timed_out=result.timed_out,
            memory=memory,
            peak_rss_bytes=result.outside_peak_rss_bytes,
            stdout=_read(here / "stdout.log"),
            stderr=_read(here / "stderr.log"),
            files=_pack_left(here),
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _pack_left(here: Path) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for item in sorted(here.iterdir()):
            if item.name not in SKIP:
                archive.add(item, arcname=item.name)
    return out.getvalue()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def stop_launcher(trial_id: str) -> int:
    """On the other host: end every process of the trial there (the coordinator's launcher
    failed or the trial was cut short)."""
    from infrarsi.trial.process import kill_trial

    return kill_trial([], trial_id)
