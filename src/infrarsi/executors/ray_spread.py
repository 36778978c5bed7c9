"""A multi-launcher trial spread over Ray nodes: the trial runs on the first launcher's node,
and each other launcher on a node of its own (the slot's placement group is STRICT_SPREAD), by
the agent there. What the trial runner needs of them (``trial.remote.Elsewhere``), over Ray."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from infrarsi.sandbox.remote import LaunchOrder, RemoteOutcome


def node_address() -> str:
    """This node's address as Ray knows it (reachable from the cluster's other nodes)."""
    import ray

    address: Callable[[], str] = ray.util.get_node_ip_address  # Ray leaves it untyped
    return address()


class RayElsewhere:
    """The other launchers' hosts of one trial: the agents of the slot's other bundles."""

    def __init__(self, peers: list[Any]) -> None:  # NodeAgent actor handles
        self.peers = peers

    def host(self) -> str:
        """This node's address: the rendezvous and the metrics channel listen there."""
        return node_address()

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def start(self, node_rank: int, order: LaunchOrder) -> RayLauncher:
        """Launcher ``node_rank`` started by its bundle's agent."""
        agent = self.peers[node_rank - 1]
        return RayLauncher(agent, agent.launch.remote(order), order.trial_id)


class RayLauncher:
    """A launcher running on another node, driven like a local process (no local pid)."""

    pid = None
    stdout = None

    def __init__(self, agent: Any, ref: Any, trial_id: str) -> None:  # an actor, its call
        self.agent, self.ref, self.trial_id = agent, ref, trial_id
        self.returncode: int | None = None
        self._outcome: RemoteOutcome | None = None

    def poll(self) -> int | None:
        import ray

        if self._outcome is None:
            ready, _ = ray.wait([self.ref], timeout=0)
            if not ready:
                return None
            self._finish()
        return self.returncode

    def wait(self) -> int | None:
        if self._outcome is None:
            self._finish()
        return self.returncode

    def stop(self) -> None:
        """End the launcher's processes on its node (the agent's other thread does it)."""
        import ray

        try:
            ray.get(self.agent.stop.remote(self.trial_id), timeout=30)
        except Exception:  # its node is gone: so are its processes
            pass

    def outcome(self) -> RemoteOutcome:
        self.wait()
        if self._outcome is None:  # wait() ends only once the outcome is in
            raise RuntimeError(f"trial {self.trial_id}: no outcome after waiting")
        return self._outcome

    def _finish(self) -> None:
        import ray

        try:
            self._outcome = ray.get(self.ref)
        except (
            ray.exceptions.RayActorError,
            ray.exceptions.RaySystemError,
            ray.exceptions.NodeDiedError,
            ray.exceptions.ObjectLostError,
        ) as exc:
            self._outcome = RemoteOutcome(
                node="lost",
                returncode=-9,
                timed_out=False,
                stderr=f"node lost: {type(exc).__name__}\n".encode(),
            )
        self.returncode = self._outcome.returncode
        if self.returncode is None:  # cut at the timeout there: still "running" here
            self.returncode = -9
