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
import os
import shutil
import socket
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from infrarsi.sandbox import memcg
from infrarsi.sandbox.process import Launchers, owner_alive, run_isolated

SKIP = ("workspace", "tmp", "cache", "home", "stdout.log", "stderr.log")  # not sent back
RDZV_HOST = "INFRARSI_RDZV_HOST"  # the address every launcher of a spread trial meets at
# the variables that tell gloo and NCCL which interface carries their traffic
SOCKET_IFNAMES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def route_source(address: str) -> str | None:
    """This host's address that traffic to ``address`` leaves from (None when the routing
    table has no way there)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((address, 9))  # no packet is sent: this only asks the routing table
            return str(probe.getsockname()[0])
    except OSError:
        return None


def route_interface(address: str) -> str | None:
    """The name of this host's network interface that traffic to ``address`` leaves by (None
    when that is loopback, or the route cannot be told): what gloo and NCCL must use on a host
    whose name resolves to a loopback address (Debian's 127.0.1.1, a container's /etc/hosts),
    where they otherwise advertise 127.0.0.1 to the other hosts and the rendezvous fails."""
    import psutil

    local = route_source(address)
    if local is None or local.startswith("127."):
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == local for a in addrs):
            return name
    return None


def bind_interface(env: dict[str, str]) -> dict[str, str]:
    """``env`` with gloo's and NCCL's interface set to the one that reaches the rendezvous
    host (``RDZV_HOST`` in ``env``), unless the user's environment or the workload's chose
    one."""
    host = env.get(RDZV_HOST)
    if not host or any(k in env or k in os.environ for k in SOCKET_IFNAMES):
        return env
    name = route_interface(host)
    return {**env, **dict.fromkeys(SOCKET_IFNAMES, name)} if name else env


@dataclass
class RemoteOutcome:
    """How a launcher on another host ended, and what its ranks left."""

    node: str
    returncode: int | None
    timed_out: bool
    host: str = ""  # its address, as the rendezvous host reaches it
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


@dataclass(frozen=True)
class LaunchOrder:
    """What a launcher on another host runs: its command and environment as the coordinator
    rendered them (paths under the coordinator's trial folder ``trial_dir``), the patched
    workspace packed, the trial it belongs to and how long it may take."""

    command: list[str]
    env: dict[str, str]
    workspace: bytes
    trial_dir: str
    trial_id: str
    timeout_s: float


class Elsewhere(Protocol):
    """Where a trial's launchers after the first run: one host per launcher."""

    def host(self) -> str:
        """This host's address, reachable from the others (rendezvous and metrics)."""

    def node(self) -> str:
        """This host's name in the cluster (the record's ``launcher_nodes``)."""

    def start(self, node_rank: int, order: LaunchOrder) -> RemoteLauncher:
        """Start launcher ``node_rank`` on its host."""


def pack_workspace(workspace: Path) -> bytes:
    """The trial's patched workspace, as the other hosts unpack it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", dereference=True) as archive:
        archive.add(workspace, arcname="workspace")
    return out.getvalue()


def run_launcher(node: str, order: LaunchOrder) -> RemoteOutcome:
    """On the other host (``node``): unpack the workspace into a folder of its own, rewrite the
    coordinator's paths to it, run the launcher to its end (memory cgroups, parent-death rules,
    the timeout), and pack what its ranks wrote."""
    trial_id = order.trial_id
    scratch = Path(tempfile.mkdtemp(prefix="infrarsi-launcher-"))
    here = scratch / trial_id
    here.mkdir()
    with tarfile.open(fileobj=io.BytesIO(order.workspace)) as archive:
        archive.extractall(here, filter="data")
    there = str(Path(order.trial_dir).parent)
    command = [part.replace(there, str(scratch)) for part in order.command]
    env = {k: v.replace(there, str(scratch)) for k, v in order.env.items()}
    for name in ("home", "cache", "tmp"):
        (here / name).mkdir(exist_ok=True)
    env = bind_interface(env)
    with memcg.trial_cgroup(trial_id, owner_alive) as cgroup:
        env.update(cgroup.env() if cgroup else {})
        result = run_isolated(
            Launchers(commands=[command], envs=[env], cwd=here / "workspace", spans_hosts=True),
            trial_id=trial_id,
            timeout_s=order.timeout_s,
            logs=(here / "stdout.log", here / "stderr.log"),
            cgroup_procs=cgroup.launchers_procs if cgroup else None,
        )
        memory = (
            {r: (m.peak_bytes, m.oom_kills) for r, m in cgroup.ranks().items()} if cgroup else {}
        )
    try:
        return RemoteOutcome(
            node=node,
            host=(route_source(env[RDZV_HOST]) or "") if RDZV_HOST in env else "",
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
    from infrarsi.sandbox.process import kill_trial

    return kill_trial([], trial_id)
