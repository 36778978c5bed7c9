"""Two hosts on one machine, for the Ray executor's tests and ``bench/executors.py``: each host
a network namespace of its own (a veth pair into a bridge: its own address), confined to its
own cores (CPU affinity, inherited by everything it starts), with a private file root (a tmpfs
mounted in a mount namespace of its own at the same path on every host: its trials' scratch,
its temporary folder and Ray's) — so nothing passes between hosts but what Ray ships. The Ray
head runs beside the driver, in this machine's own namespace (Ray needs a raylet where the
driver runs), with no CPUs of its own: trials run only on the hosts. The head's and the
driver's CPU time is what ``overhead_cpu_s`` reports.

    with TwoHosts.start() as hosts:          # needs root, ``ip`` and network namespaces
        RayExecutor(root, hosts.address)     # trials on 10.77.K.1 and 10.77.K.2
        hosts.kill(1)                        # the second host's processes die (a lost machine)
        hosts.add()                          # a host that joins late

``why_not()`` says why the fixture cannot start on this machine (None when it can): the tests
skip with that reason unless ``INFRARSI_REQUIRE_HOSTS=1`` (CI) turns the skip into a failure.
The virtual environment and the checkout are shared read-only in effect (the hosts write only
to their private roots).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
ROOT_MOUNT = "/srv/infrarsi-host"  # each host's private root, the same path on every host
HEAD_SUFFIX = 254  # the head's address: 10.77.K.254 (the bridge's own)
# a host lost is noticed within ~3 s (Ray's defaults take ~15)
HEALTH_ENV = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3"}
START_TIMEOUT_S = 60.0


def why_not() -> str | None:
    """Why two hosts cannot be made here, or None: root, ``ip``, network namespaces."""
    if os.geteuid() != 0:
        return "two hosts on one machine need root (network namespaces, mounts)"
    if shutil.which("ip") is None:
        return "two hosts on one machine need `ip` (Debian's iproute2: apt-get install iproute2)"
    if shutil.which("nsenter") is None or shutil.which("unshare") is None:
        return "two hosts on one machine need nsenter and unshare (util-linux)"
    tag = uuid.uuid4().hex[:4]
    steps = [  # what the fixture does, on a throwaway namespace, bridge and mount
        (["ip", "netns", "add", f"irsi-probe-{tag}"], "a network namespace"),
        (["ip", "link", "add", f"irsi-pbr{tag}", "type", "bridge"], "a bridge"),
        (
            ["ip", "link", "add", f"irsi-pv{tag}", "type", "veth", "peer", "name", "eth0",
             "netns", f"irsi-probe-{tag}"],
            "a veth pair",
        ),
        (
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             f"mkdir -p {ROOT_MOUNT} && mount -t tmpfs tmpfs {ROOT_MOUNT}"],
            "a tmpfs in a mount namespace",
        ),
    ]  # fmt: skip
    try:
        for command, what in steps:
            out = subprocess.run(command, capture_output=True, text=True)
            if out.returncode != 0:
                return f"the kernel refused {what}: {out.stderr.strip()}"
        return None
    finally:
        subprocess.run(["ip", "link", "del", f"irsi-pv{tag}"], capture_output=True)
        subprocess.run(["ip", "link", "del", f"irsi-pbr{tag}"], capture_output=True)
        subprocess.run(["ip", "netns", "del", f"irsi-probe-{tag}"], capture_output=True)


@dataclasses.dataclass
class Host:
    """One host: its namespace, address, cores, Ray resource name and Ray process."""

    index: int
    netns: str
    address: str
    cores: list[int]
    process: subprocess.Popen | None = None
    alive: bool = True

    @property
    def resource(self) -> str:
        """A custom Ray resource only this host has (to pin a trial there)."""
        return f"host_{self.index}"

    def describe(self) -> dict:
        return {"address": self.address, "cores": len(self.cores), "cpus": self.cores}


class TwoHosts:
    """A bridge, a Ray head beside the driver and hosts in namespaces of their own."""

    def __init__(self, subnet: int, work: Path) -> None:
        self.subnet, self.work = subnet, work
        self.tag = f"{subnet:x}"
        self.bridge = f"irsi-br{self.tag}"
        self.head_address = f"10.77.{subnet}.{HEAD_SUFFIX}"
        self.port = 0
        self.head: subprocess.Popen | None = None
        self.hosts: list[Host] = []

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    @contextlib.contextmanager
    def start(cls, hosts: int = 2, cores: list[list[int]] | None = None):
        """Bring up the bridge, the head and ``hosts`` hosts (host i on ``cores[i]``, by
        default one core each, round robin over this machine's); take them all down after."""
        reason = why_not()
        if reason:
            raise RuntimeError(reason)
        made = cls(_free_subnet(), Path(tempfile.mkdtemp(prefix="irsi-hosts-")))
        try:
            made._bridge_up()
            made._head_up()
            for i in range(hosts):
                made.add(cores[i] if cores else None, wait=False)
            made.wait_for(hosts)
            yield made
        finally:
            made.stop()

    @property
    def address(self) -> str:
        """The Ray head's address (HOST:PORT), as ``--ray-address`` takes it."""
        return f"{self.head_address}:{self.port}"

    def add(
        self,
        cores: list[int] | None = None,
        wait: bool = True,
        resources: dict[str, float] | None = None,
    ) -> Host:
        """A further host (a machine that joins the cluster): its namespace, its link, its
        Ray worker node (with ``resources`` beside its own ``host_<i>``)."""
        i = len(self.hosts)
        ncpu = os.cpu_count() or 1
        host = Host(
            index=i,
            netns=f"irsi-{self.tag}-h{i}",
            address=f"10.77.{self.subnet}.{i + 1}",
            cores=cores if cores is not None else [i % ncpu],
        )
        veth = f"irsiv{self.tag}-{i}"
        _ip("netns", "add", host.netns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.netns, "link", "set", "eth0", "up")
        _ip("-n", host.netns, "link", "set", "lo", "up")
        host.process = self._worker_up(host, resources or {})
        self.hosts.append(host)
        if wait:
            self.wait_for(len(self.alive()))
        return host

    def kill(self, index: int) -> int:
        """Every process of host ``index`` killed at once (its Ray node, its trials): a
        machine lost. Returns how many were killed."""
        host = self.hosts[index]
        host.alive = False
        pids = _tree(host.netns)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)

    def trial_pids(self, index: int) -> list[int]:
        """The processes of trials running on host ``index``: those working in a trial's
        workspace (a trial has network and PID namespaces of its own, so they are found as
        descendants of the host's processes, not in its network namespace)."""
        found = []
        for pid in _tree(self.hosts[index].netns):
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).cwd().endswith("/workspace"):
                    found.append(pid)
        return found

    def stop(self) -> None:
        """Every host's processes, the head, the links and namespaces gone."""
        for host in self.hosts:
            self.kill(host.index)
        if self.head is not None:
            _end(self.head)
            _kill_mentioning(str(self.work))  # a head process that left the group
        for host in self.hosts:
            if host.process is not None:
                _end(host.process)
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        shutil.rmtree(self.work, ignore_errors=True)

    def overhead_cpu_s(self) -> float:
        """CPU seconds the head's processes have used so far (the driver's own is the caller's
        ``time.process_time``)."""
        if self.head is None:
            return 0.0
        total = 0.0
        try:
            procs = [psutil.Process(self.head.pid)]
            procs += procs[0].children(recursive=True)
        except psutil.NoSuchProcess:
            return 0.0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    def alive(self) -> list[Host]:
        """The hosts not killed."""
        return [h for h in self.hosts if h.alive]

    def describe(self) -> list[dict]:
        return [h.describe() for h in self.alive()]

    def wait_for(self, nodes: int, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until the head sees ``nodes`` live hosts (its own node aside)."""
        deadline = time.monotonic() + timeout_s
        seen = -1
        while time.monotonic() < deadline:
            seen = self._alive_hosts()
            if seen >= nodes:
                return
            time.sleep(0.5)
        raise RuntimeError(
            f"only {seen} of {nodes} hosts joined the Ray head at {self.address} within "
            f"{timeout_s:.0f} s; {self._logs_tail()}"
        )

    def _logs_tail(self, lines: int = 8) -> str:
        """The last lines of the head's and each host's log (the folder goes with ``stop``)."""
        out = []
        for log in sorted(self.work.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"{log.name}: " + " | ".join(text))
        return "; ".join(out) or "no logs"

    # -- the pieces --------------------------------------------------------------------------
    def _bridge_up(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.head_address}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def _head_env(self) -> dict[str, str]:
        return {**os.environ, **HEALTH_ENV, "RAY_TMPDIR": str(self.work / "head")}

    def _head_up(self) -> None:
        self.port = _free_port(self.head_address)
        log = open(self.work / "head.log", "wb")
        self.head = subprocess.Popen(
            [
                RAY, "start", "--head", "--block", f"--node-ip-address={self.head_address}",
                f"--port={self.port}", "--num-cpus=0", f"--temp-dir={self.work / 'head'}",
                "--include-dashboard=false", "--disable-usage-stats",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._head_env(),
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                socket.create_connection((self.head_address, self.port), timeout=1).close()
                return
            if self.head.poll() is not None:
                break
            time.sleep(0.3)
        raise RuntimeError(f"the Ray head did not start; {self._logs_tail()}")

    def _worker_up(self, host: Host, extra: dict[str, float]) -> subprocess.Popen:
        """The host's Ray node: in its network namespace, in a mount namespace of its own with
        a tmpfs at ``ROOT_MOUNT`` (its temporary folder and Ray's), on its cores."""
        Path(ROOT_MOUNT).mkdir(parents=True, exist_ok=True)
        resources = json.dumps({host.resource: 1, **extra})
        inner = (
            f"mount -t tmpfs -o size=8g,mode=1777 tmpfs {ROOT_MOUNT} && "
            f"mkdir -p {ROOT_MOUNT}/tmp {ROOT_MOUNT}/ray && "
            f"exec taskset -c {','.join(map(str, host.cores))} "
            f"{RAY} start --block --address={self.address} --node-ip-address={host.address} "
            f"--num-cpus={len(host.cores)} --resources='{resources}' "
            f"--temp-dir={ROOT_MOUNT}/ray --disable-usage-stats"
        )
        log = open(self.work / f"host{host.index}.log", "wb")
        return subprocess.Popen(
            [
                "nsenter", f"--net=/var/run/netns/{host.netns}",
                "unshare", "--mount", "--propagation", "private", "sh", "-c", inner,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **HEALTH_ENV, "TMPDIR": f"{ROOT_MOUNT}/tmp"},
            start_new_session=True,
        )  # fmt: skip

    def _alive_hosts(self) -> int:
        """Live nodes other than the head's, as ``ray status`` lists them (-1: no answer)."""
        out = subprocess.run(
            [RAY, "status", "--address", self.address],
            capture_output=True,
            text=True,
            env=self._head_env(),
        )
        if out.returncode != 0 or "Active:" not in out.stdout:
            return -1
        active = out.stdout.split("Active:", 1)[1].split("Pending:", 1)[0]
        return sum(1 for line in active.splitlines() if "node_" in line) - 1


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")


def _netns_pids(netns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _tree(netns: str) -> list[int]:
    """The processes of a network namespace and all their descendants (a trial's own network
    namespace is a child of its host's)."""
    pids = _netns_pids(netns)
    for pid in list(pids):
        with contextlib.suppress(psutil.Error):
            pids += [c.pid for c in psutil.Process(pid).children(recursive=True)]
    return sorted(set(pids))


def _end(process: subprocess.Popen) -> None:
    """The process group of ``process`` ended (terminated, then killed after 10 s)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _kill_mentioning(text: str) -> None:
    """Kill every process whose command line mentions ``text`` (the head's temporary folder)."""
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(text in part for part in p.info["cmdline"] or []):
                p.kill()


def _free_subnet() -> int:
    """A 10.77.K.0/24 no interface of this machine holds (several fixtures may run at once)."""
    used = {
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET
    }
    for k in range(1, 255):
        if f"10.77.{k}.{HEAD_SUFFIX}" not in used:
            return k
    raise RuntimeError("no free 10.77.K.0/24 subnet for the two-host fixture")


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
