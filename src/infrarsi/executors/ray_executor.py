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
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from infrarsi.errors import InfraRSIError
from infrarsi.executors import Executor, LocalExecutor, TrialCancelled, TrialRequest
from infrarsi.executors.ray_node import NodeAgent, bundle_of
from infrarsi.trial import TrialRecord, TrialStatus
from infrarsi.workloads.manifest import Manifest

# (job, CPUs, resources, nodes) -> slots free for a trial
_IDLE: dict[tuple[Any, ...], list[_Slot]] = {}


class RayUnavailable(InfraRSIError, ValueError):
    """Ray is not installed, or the cluster cannot be reached; the message says which (bad
    input: exit 2, before any trial is spent)."""


PLACE_WAIT_S = 2.0  # how long submit waits for a new slot's nodes before queueing the trial
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
        self.ray: Any = ray  # untyped: its calls are typed by what they return here
        self.root = Path(root).resolve()
        self.cpus_per_trial, self.resources = cpus_per_trial, dict(resources or {})
        self._jobs: dict[str, _RayJob] = {}
        self._next = itertools.count()
        self._cpus: float | None = None  # a trial's CPUs, once known
        self._agent_class = ray.remote(max_restarts=0, max_task_retries=0)(NodeAgent)

    # -- submit ----------------------------------------------------------------------------
    def submit(self, request: TrialRequest, slot: _Slot | None = None) -> str:
        """Queue a trial on a slot (a placement group reserving a node's CPUs, and the agent
        process that runs trials there): ``slot`` when given (a pinned comparison's), else an
        idle one of the pool this process keeps (kept between trials: a new group and a new
        worker per trial cost seconds every time), else a new group. A trial whose group waits
        for a node is sent once the group is placed, or to a slot that falls idle first (a
        waiting group would otherwise wait for ever while an idle slot holds the only free
        node: a node lost, more trials in flight than nodes)."""
        spec = LocalExecutor(self.root).resolve(request)  # a bad request fails here
        shipped, bundle = bundle_of(request, self.root)
        nodes = _spread_over(spec.manifest)
        pooled = slot is None
        if slot is None:
            slot = self._live_idle(self._idle(nodes))
        if slot is None:
            slot = self._new_slot(nodes)
            self.ray.wait([slot.group.ready()], timeout=PLACE_WAIT_S)  # a free node: at once
        handle = f"ray-{next(self._next)}"
        self._jobs[handle] = job = _RayJob(
            slot=slot,
            pooled=pooled,
            nodes=nodes,
            request=request,
            shipped=(shipped.model_dump(), bundle),
            t0=time.time(),
        )
        self._dispatch(job)
        return handle

    def _dispatch(self, job: _RayJob) -> bool:
        """Send a queued trial to its slot once the slot's group is placed (or to an idle
        slot that came free meanwhile); whether it is on its way."""
        if job.ref is not None:
            return True
        slot = job.slot
        if slot is None:  # released (cancelled) before it was sent
            return False
        if not slot.placed():
            free = self._live_idle(self._idle(job.nodes)) if job.pooled else None
            if free is None:
                return False
            slot.remove()  # the waiting group gives way to the slot that came free
            job.slot = slot = free
        if not slot.agents:
            self._equip(slot, job.nodes)
        request, bundle = job.shipped
        job.ref = slot.agent.run.remote(request, bundle, slot.agents[1:])
        job.t0 = time.time()
        return True

    @contextlib.contextmanager
    def pinned(self, manifest: Manifest | None = None) -> Iterator[Executor]:
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
        """An idle slot still in place, or a new one (placed: this waits for the nodes)."""
        slot = self._live_idle(self._idle(nodes)) or self._new_slot(nodes)
        self.ray.get(slot.group.ready())
        if not slot.agents:
            self._equip(slot, nodes)
        return slot

    @staticmethod
    def _live_idle(idle: list[_Slot]) -> _Slot | None:
        """An idle slot whose group is still in place (one whose node went away is removed)."""
        while idle:
            slot = idle.pop()
            if slot.placed():
                return slot
            slot.remove()
        return None

    def _new_slot(self, nodes: int) -> _Slot:
        """A placement group reserving the CPUs (and the custom resources asked for) of
        ``nodes`` distinct nodes; its agents come once it is placed."""
        from ray.util.placement_group import placement_group

        if self._cpus is None:
            self._cpus = self.cpus_per_trial or self._node_cpus()
        group = placement_group(
            [{"CPU": self._cpus, **self.resources}] * nodes,
            strategy="STRICT_SPREAD" if nodes > 1 else "PACK",
        )
        return _Slot(group, [])

    def _equip(self, slot: _Slot, nodes: int) -> None:
        """A placed slot's agents, and the nodes it holds (ids and addresses: what a record
        names if the slot's node is lost)."""
        from ray.util.placement_group import placement_group_table

        slot.agents = self._agents(slot.group, nodes)
        ids = list(placement_group_table(slot.group).get("bundles_to_node_id", {}).values())
        address = {n["NodeID"]: n["NodeManagerAddress"] for n in self._nodes()}
        slot.nodes, slot.hosts = ids, [address.get(i, "") for i in ids]

    def _nodes(self) -> list[dict[str, Any]]:
        """The cluster's nodes as Ray describes them."""
        nodes: list[dict[str, Any]] = self.ray.nodes()
        return nodes

    def _agents(self, group: Any, nodes: int) -> list[Any]:
        """An agent on each bundle of a placed group."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return [
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

    def _node_cpus(self) -> float:
        """A whole node's CPUs: the smallest node's (a trial then fits on any)."""
        cpus = [
            n["Resources"].get("CPU", 0)
            for n in self._nodes()
            if n.get("Alive") and n["Resources"].get("CPU")
        ]
        return float(min(cpus)) if cpus else 1.0

    # -- poll / cancel ---------------------------------------------------------------------
    def poll(self, handle: str) -> TrialRecord | None:
        job = self._jobs[handle]
        if job.record is not None:
            return job.record
        if job.ref is None and job.slot is None:
            raise TrialCancelled(f"trial {handle} was cancelled before it started")
        if not self._dispatch(job):
            return None  # waiting for a node
        ready, _ = self.ray.wait([job.ref], timeout=0)
        if not ready:
            return None
        errors, lost = self.ray.exceptions, False
        try:
            record_json, node_workdir, tar = self.ray.get(job.ref)
            job.record = self._land(job.request, record_json, node_workdir, tar)
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
            job.record, lost = _lost(job.request, job.t0, exc, job.slot), True
        finally:
            self._release(job, lost=lost)
        return job.record

    def cancel(self, handle: str) -> bool:
        """Stop a trial that has not ended: its agent is killed (a trial's processes die with
        it) and its slot given up."""
        job = self._jobs[handle]
        if job.ref is not None:
            ready, _ = self.ray.wait([job.ref], timeout=0)
            if ready:
                return False
        self._release(job, lost=True)
        return True

    def _release(self, job: _RayJob, lost: bool = False) -> None:
        """The job's slot back to the pool (a pinned one stays with its holder); one whose
        node or agent is gone, or whose trial was stopped, is removed."""
        slot, job.slot = job.slot, None
        if slot is None:
            return
        if lost:
            slot.remove()
        elif job.pooled:
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


def _spread_over(manifest: Manifest) -> int:
    """Nodes a trial of this workload takes: one per launcher when its ranks report through
    the harness's channel (the probe's or the observer's lines then reach the trial over TCP),
    else one (a workload read from its standard output is timed by the lines the harness
    reads, so its launchers stay together)."""
    return manifest.launch.nodes if manifest.launch.on_channel else 1


@dataclasses.dataclass
class _RayJob:
    """One submitted trial: its slot (None once released), what travels to the node, the
    remote call once sent, and its record once landed."""

    slot: _Slot | None
    pooled: bool  # its slot came from (and goes back to) the pool, not a pinned holder
    nodes: int
    request: TrialRequest
    shipped: tuple[dict[str, Any], bytes]
    t0: float
    ref: Any = None  # the agent's remote call, once sent
    record: TrialRecord | None = None


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

    group: Any  # a ray.util.placement_group.PlacementGroup
    agents: list[Any]  # Ray actor handles of NodeAgent
    nodes: list[str] = dataclasses.field(default_factory=list)  # the Ray node ids it holds
    hosts: list[str] = dataclasses.field(default_factory=list)  # and their addresses

    @property
    def agent(self) -> Any:
        """The agent that runs the trial (the first bundle's)."""
        return self.agents[0]

    def placed(self) -> bool:
        """Whether the group holds its nodes now."""
        from ray.util.placement_group import placement_group_table

        state: object = placement_group_table(self.group).get("state")
        return state == "CREATED"

    def remove(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for agent in self.agents:
            ray.kill(agent, no_restart=True)
        remove_placement_group(self.group)


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


def _lost(request: TrialRequest, t0: float, exc: Exception, slot: _Slot | None) -> TrialRecord:
    """The record of a trial whose node was lost: ``crash``, "node lost", naming the node(s)
    its slot held."""
    nodes, hosts = (slot.nodes, slot.hosts) if slot is not None else ([], [])
    where = f" ({', '.join(hosts)})" if any(hosts) else ""
    what = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}" if str(exc) else ""
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
        node=nodes[0] if nodes else "lost",
        launcher_nodes=nodes if len(nodes) > 1 else [],
        hosts=hosts if any(hosts) else [],
        error=f"node lost{where}: {what or type(exc).__name__}",
    )
