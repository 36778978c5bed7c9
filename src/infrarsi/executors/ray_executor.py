"""Trials on a Ray cluster: each trial runs on one node, in a slot — a placement group that
reserves the node's CPUs and a long-lived agent process in it — with the workload and its
patches shipped through Ray and the trial's folder shipped back; no shared filesystem is
assumed.

What travels out: the request (plain data), and a tar of what the node cannot find on its own —
the workload's folder when the request names a manifest by path (a user's workload, a derived
one), and every diff file it names (a proposed patch, a user's diff). The node runs the trial
with its own ``LocalExecutor`` (the same isolation, memory cgroups, parent-death rules and
record) in a scratch folder, then sends back the record (its ``node``: the Ray node id; its
``fingerprint``: that host's) and a tar of the trial's folder and its evaluation folder, which
land under the executor's root as a local trial's would; paths in the record are rewritten to
where they landed.

Slots are kept between trials, one per trial in flight, shared by every executor of the
process: a new placement group and a new Ray worker (which imports InfraRSI) per trial cost
seconds each time. ``pinned()`` holds one slot for a block, so an interleaved comparison (Apply)
times all its trials on one node.

A node lost mid-trial (its raylet or machine gone) ends that trial ``crash`` with the reason
"node lost"; its processes die with the node's agent (the trial runner's parent-death rules).
By default one timed trial runs per node at a time: a slot asks for every CPU of a node
(``cpus_per_trial=None``), so two trials never share one.

Ray is an optional extra (``pip install 'infrarsi[ray]'``; ``scripts/setup.sh`` installs it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import shutil
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from infrarsi.errors import InfraRSIError
from infrarsi.executors import Executor, LocalExecutor, TrialCancelled, TrialRequest
from infrarsi.trial import TrialRecord, TrialStatus, run_trial

SKIP = ("tmp", "cache", "home", "__pycache__")  # scratch a trial leaves that nobody reads
_IDLE: dict[tuple, list] = {}  # (job, CPUs, resources) -> slots free for a trial


class RayUnavailable(InfraRSIError, ValueError):
    """Ray is not installed, or the cluster cannot be reached; the message says which (bad
    input: exit 2, before any trial is spent)."""


REACH_TIMEOUT_S = 3.0  # how long an explicit cluster address may take to answer a connection


def check_reachable(address: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """RayUnavailable naming ``address`` and the fix unless a TCP connection to it opens
    within ``timeout_s`` (``auto`` and ``ray://`` client addresses are left to Ray, which
    answers those at once): Ray itself retries an unreachable head for about a minute."""
    import socket

    if address in ("auto", "local") or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailable(f"--ray-address {address!r}: give HOST:PORT of a Ray head (or auto)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise RayUnavailable(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}); start one with "
            "`ray start --head` there, or give --ray-address HOST:PORT of a running head"
        ) from None


class RayExecutor(Executor):
    """submit / poll / cancel on a Ray cluster at ``address`` ('auto': the one this machine
    belongs to)."""

    def __init__(
        self,
        root: Path,
        address: str = "auto",
        cpus_per_trial: float | None = None,
        resources: dict[str, float] | None = None,
    ):
        """``cpus_per_trial``: CPUs a trial's placement group reserves (None: a whole node's,
        so timed trials never share a node); ``resources``: custom resources it must have
        (e.g. a node's name, to pin a trial there)."""
        try:
            import ray
        except ImportError:
            raise RayUnavailable(
                "the Ray executor needs Ray: pip install 'infrarsi[ray]'"
            ) from None
        if not ray.is_initialized():
            check_reachable(address)
            try:
                ray.init(
                    address=address,
                    namespace="infrarsi",
                    log_to_driver=False,
                    ignore_reinit_error=True,
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise RayUnavailable(f"no Ray cluster at {address}: {exc}") from None
        self.ray, self.root = ray, Path(root).resolve()
        self.cpus_per_trial, self.resources = cpus_per_trial, dict(resources or {})
        self._jobs: dict[str, dict] = {}
        self._next = itertools.count()
        self._cpus: float | None = None  # a trial's CPUs, once known
        self._agent_class = ray.remote(max_restarts=0, max_task_retries=0)(NodeAgent)

    # -- submit ----------------------------------------------------------------------------
    def submit(self, request: TrialRequest, slot: _Slot | None = None) -> str:
        """Queue a trial on a slot (a placement group reserving a node's CPUs, and the agent
        process that runs trials there): ``slot`` when given (a pinned comparison's), else
        one from the pool this process keeps (one per trial in flight, kept between trials:
        a new group and a new worker per trial cost seconds every time)."""
        spec = LocalExecutor(self.root).resolve(request)  # a bad request fails here
        shipped, bundle = _bundle(request, self.root)
        pooled = slot is None
        if slot is None:
            slot = self._take_slot(_spread_over(spec.manifest))
        ref = slot.agent.run.remote(shipped.model_dump(), bundle, slot.agents[1:])
        handle = f"ray-{next(self._next)}"
        self._jobs[handle] = {
            "ref": ref,
            "slot": slot,
            "pooled": pooled,
            "request": request,
            "t0": time.time(),
            "record": None,
        }
        return handle

    @contextlib.contextmanager
    def pinned(self, manifest=None) -> Iterator[Executor]:
        """Every trial submitted through the yielded executor runs in one slot held for the
        block (one node; one per launcher of ``manifest``'s workload when it spreads): an
        interleaved comparison compares times of the same hosts."""
        nodes = _spread_over(manifest) if manifest is not None else 1
        slot = self._take_slot(nodes)
        try:
            yield _Pinned(self, slot)
        finally:
            self._idle(nodes).append(slot)

    def close(self) -> None:
        """Give the cluster back the nodes that this process's idle slots hold."""
        release_idle()

    def _idle(self, nodes: int) -> list[_Slot]:
        """The idle slots of ``nodes`` nodes of this driver's job and this executor's shape:
        shared by every RayExecutor of the process (an optimize makes one per stage), so a
        slot one of them keeps never blocks another's trial."""
        if self._cpus is None:
            self._cpus = self.cpus_per_trial or self._node_cpus()
        key = (
            self.ray.get_runtime_context().get_job_id(),
            self._cpus,
            tuple(sorted(self.resources.items())),
            nodes,
        )
        return _IDLE.setdefault(key, [])

    def _take_slot(self, nodes: int) -> _Slot:
        """An idle slot still in place, or a new one: a placement group reserving the CPUs
        (and the custom resources asked for) of ``nodes`` distinct nodes, and an agent on each."""
        from ray.util.placement_group import placement_group, placement_group_table
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        idle = self._idle(nodes)
        while idle:
            slot = idle.pop()
            if placement_group_table(slot.group).get("state") == "CREATED":
                return slot
            slot.remove()  # a node of it went away while it was idle
        group = placement_group(
            [{"CPU": self._cpus, **self.resources}] * nodes,
            strategy="STRICT_SPREAD" if nodes > 1 else "PACK",
        )
        agents = [
            self._agent_class.options(
                num_cpus=self._cpus,
                resources=self.resources or None,
                max_concurrency=4,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    group, placement_group_bundle_index=i
                ),
            ).remote()
            for i in range(nodes)
        ]
        return _Slot(group, agents)

    def _node_cpus(self) -> float:
        """A whole node's CPUs: the smallest node's (a trial then fits on any)."""
        cpus = [
            n["Resources"].get("CPU", 0)
            for n in self.ray.nodes()
            if n.get("Alive") and n["Resources"].get("CPU")
        ]
        return min(cpus) if cpus else 1

    # -- poll / cancel ---------------------------------------------------------------------
    def poll(self, handle: str) -> TrialRecord | None:
        job = self._jobs[handle]
        if job["record"] is not None:
            return job["record"]
        ready, _ = self.ray.wait([job["ref"]], timeout=0)
        if not ready:
            return None
        errors, lost = self.ray.exceptions, False
        try:
            record_json, node_workdir, tar = self.ray.get(job["ref"])
            job["record"] = self._land(job["request"], record_json, node_workdir, tar)
        except errors.TaskCancelledError:
            raise TrialCancelled(f"trial {handle} was cancelled") from None
        except (
            errors.RayActorError,
            errors.NodeDiedError,
            errors.WorkerCrashedError,
            errors.ObjectLostError,
            errors.RaySystemError,
            errors.LocalRayletDiedError,
        ) as exc:
            job["record"], lost = _lost(job["request"], job["t0"], exc), True
        finally:
            self._release(job, lost=lost)
        return job["record"]

    def cancel(self, handle: str) -> bool:
        """Stop a trial that has not ended: its agent is killed (a trial's processes die with
        it) and its slot given up."""
        job = self._jobs[handle]
        ready, _ = self.ray.wait([job["ref"]], timeout=0)
        if ready:
            return False
        self._release(job, lost=True)
        return True

    def _release(self, job: dict, lost: bool = False) -> None:
        """The job's slot back to the pool (a pinned one stays with its holder); one whose
        node or agent is gone, or whose trial was stopped, is removed."""
        slot, job["slot"] = job.get("slot"), None
        if slot is None:
            return
        if lost:
            slot.remove()
        elif job["pooled"]:
            self._idle(len(slot.agents)).append(slot)

    def _land(
        self, request: TrialRequest, record_json: str, node_workdir: str, tar: bytes
    ) -> TrialRecord:
        """The node's trial folder unpacked under the root's workdir, its record's paths
        rewritten to where it landed, and saved there."""
        workdir = self.root / request.workdir
        workdir.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            archive.extractall(workdir, filter="data")
        record = TrialRecord.from_json(record_json).moved(node_workdir, str(workdir))
        if record.trial_dir and Path(record.trial_dir).is_dir():
            record.save(Path(record.trial_dir) / "record.json")
        return record


def _spread_over(manifest) -> int:
    """Nodes a trial of this workload takes: one per launcher when its ranks report through
    the probe (their metrics then reach the trial over TCP), else one (a workload read from its
    standard output is timed by the lines the harness reads, so its launchers stay together)."""
    return manifest.launch.nodes if manifest.launch.metrics == "probe" else 1


def release_idle() -> None:
    """Remove every idle slot this process keeps (its driver's nodes back to the cluster
    before the driver ends, which would do it too)."""
    for slots in _IDLE.values():
        while slots:
            slots.pop().remove()


@dataclasses.dataclass
class _Slot:
    """A placement group reserving the CPUs of one node per launcher (on distinct nodes), and
    the agent process running on each; the first agent runs the trial."""

    group: object
    agents: list

    @property
    def agent(self):
        return self.agents[0]

    def remove(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for agent in self.agents:
            ray.kill(agent, no_restart=True)
        remove_placement_group(self.group)


class NodeAgent:
    """A long-lived process on a node that runs the trials sent to its slot, one at a time:
    warm, so a trial does not pay for a new Ray worker and its imports. In a slot of several
    nodes, the first bundle's agent runs the trial and the others' run its other launchers
    (``launch``; ``stop`` ends one, from another thread of the agent)."""

    def __init__(self) -> None:
        self._one_trial = threading.Lock()  # the agent takes more calls (stop) than trials

    def run(self, request: dict, bundle: bytes, peers: Sequence = ()) -> tuple[str, str, bytes]:
        with self._one_trial:  # trials sent to one slot run one after another
            return _run_on_node(request, bundle, list(peers))

    def launch(
        self,
        command: list[str],
        env: dict[str, str],
        workspace: bytes,
        trial_dir: str,
        trial_id: str,
        timeout_s: float,
    ):
        import ray

        from infrarsi.trial.remote import run_launcher

        return run_launcher(
            ray.get_runtime_context().get_node_id(),
            command,
            env,
            workspace,
            trial_dir,
            trial_id,
            timeout_s,
        )

    def stop(self, trial_id: str) -> int:
        from infrarsi.trial.remote import stop_launcher

        return stop_launcher(trial_id)


class _Pinned(Executor):
    """A view of a RayExecutor whose trials all go to one slot (one node)."""

    def __init__(self, parent: RayExecutor, slot: _Slot) -> None:
        self.parent, self.slot, self.root = parent, slot, parent.root

    def submit(self, request: TrialRequest) -> str:
        return self.parent.submit(request, slot=self.slot)

    def poll(self, handle: str) -> TrialRecord | None:
        return self.parent.poll(handle)

    def cancel(self, handle: str) -> bool:
        return self.parent.cancel(handle)


def _bundle(request: TrialRequest, root: Path) -> tuple[TrialRequest, bytes]:
    """The request as the node will run it (paths inside the bundle) and the bundle: the
    workload's folder when named by path, and each diff file it names."""
    buffer = io.BytesIO()
    shipped = request.model_copy(deep=True)
    shipped.workdir = "trials"  # inside the node's scratch folder; it lands at request.workdir
    # links resolved: a workload may share files with another through links, which would
    # point nowhere on the node (a local trial's workspace resolves them too)
    with tarfile.open(fileobj=buffer, mode="w:gz", dereference=True) as archive:
        path = root / request.workload
        if path.exists():  # a manifest by path: its folder goes along
            folder = path if path.is_dir() else path.parent
            archive.add(folder, arcname="workload", filter=_no_scratch)
            shipped.workload = "workload" if path.is_dir() else f"workload/{path.name}"
        patches = []
        for i, patch in enumerate(request.patches):
            file = root / patch
            if file.is_file():
                name = f"patches/{i}-{file.name}"
                archive.add(file, arcname=name)
                patches.append(name)
            else:
                patches.append(patch)  # a catalog id: the node's workload has it
        shipped.patches = patches
    return shipped, buffer.getvalue()


def _no_scratch(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if Path(info.name).name in ("__pycache__", ".git") else info


def _run_on_node(request: dict, bundle: bytes, peers: list) -> tuple[str, str, bytes]:
    """On the node: unpack, run the trial as a local one (its other launchers on the peers'
    nodes, when it has peers), pack its folder."""
    import ray

    scratch = Path(tempfile.mkdtemp(prefix="infrarsi-ray-"))
    try:
        with tarfile.open(fileobj=io.BytesIO(bundle)) as archive:
            archive.extractall(scratch, filter="data")
        req = TrialRequest.model_validate(request)
        spec = LocalExecutor(scratch).resolve(req)
        if peers:
            from infrarsi.executors.ray_spread import RayElsewhere

            spec = dataclasses.replace(spec, elsewhere=RayElsewhere(peers))
        record = run_trial(spec, scratch / req.workdir)
        record.node = ray.get_runtime_context().get_node_id()
        workdir = scratch / req.workdir
        record.save(Path(record.trial_dir) / "record.json")
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w:gz") as archive:
            for item in sorted(workdir.iterdir()) if workdir.is_dir() else []:
                if item.name == record.trial_id or item.name.startswith(f".{record.trial_id}."):
                    archive.add(item, arcname=item.name, filter=_no_trial_scratch)
        return record.model_dump_json(), str(workdir), out.getvalue()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _no_trial_scratch(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    parts = Path(info.name).parts
    return None if len(parts) > 1 and parts[1] in SKIP else info


def _lost(request: TrialRequest, t0: float, exc: Exception) -> TrialRecord:
    """The record of a trial whose node was lost: ``crash``, "node lost"."""
    return TrialRecord(
        trial_id=f"lost-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}",
        workload=request.workload,
        scale=request.scale,
        status=TrialStatus.CRASH,
        knobs=request.knobs,
        patches=[],
        locked_files={},
        contract_hash=request.contract_hash,
        mem_cap_bytes=request.mem_cap_bytes,
        timeout_s=request.timeout_s or 0.0,
        started_unix_s=t0,
        cost_s=time.time() - t0,
        node="lost",
        error=f"node lost: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        if str(exc)
        else f"node lost: {type(exc).__name__}",
    )
