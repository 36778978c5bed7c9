"""What runs on a Ray node for the Ray executor, and what travels to it: the agent that runs a
slot's trials (and, in a slot of several nodes, the other launchers of one), the bundle of
files a node cannot find on its own, and the trial run there as a local one whose folder is
packed to go back."""

from __future__ import annotations

import dataclasses
import io
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infrarsi.executors import LocalExecutor, TrialRequest
from infrarsi.executors.ray_spread import RayElsewhere, node_address
from infrarsi.sandbox.remote import LaunchOrder, RemoteOutcome, run_launcher, stop_launcher
from infrarsi.trial import run_trial

SKIP = ("tmp", "cache", "home", "__pycache__")  # scratch a trial leaves that nobody reads


class NodeAgent:
    """A long-lived process on a node that runs the trials sent to its slot, one at a time:
    warm, so a trial does not pay for a new Ray worker and its imports. In a slot of several
    nodes, the first bundle's agent runs the trial and the others' run its other launchers
    (``launch``; ``stop`` ends one, from another thread of the agent)."""

    def __init__(self) -> None:
        self._one_trial = threading.Lock()  # the agent takes more calls (stop) than trials

    def run(
        self, request: dict[str, Any], bundle: bytes, peers: Sequence[Any] = ()
    ) -> tuple[str, str, bytes]:
        with self._one_trial:  # trials sent to one slot run one after another
            return _run_on_node(request, bundle, list(peers))

    def launch(self, order: LaunchOrder) -> RemoteOutcome:
        """Run one of a spread trial's other launchers on this node, to its end."""
        import ray

        return run_launcher(ray.get_runtime_context().get_node_id(), order)

    def stop(self, trial_id: str) -> int:
        return stop_launcher(trial_id)


def bundle_of(request: TrialRequest, root: Path) -> tuple[TrialRequest, bytes]:
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


def _run_on_node(
    request: dict[str, Any], bundle: bytes, peers: list[Any]
) -> tuple[str, str, bytes]:
    """On the node: unpack, run the trial as a local one (its other launchers on the peers'
    nodes, when it has peers), pack its folder."""
    import ray

    scratch = Path(tempfile.mkdtemp(prefix="infrarsi-ray-"))
    try:
        with tarfile.open(fileobj=io.BytesIO(bundle)) as archive:
            archive.extractall(scratch, filter="data")
        req = TrialRequest.model_validate(request)
        spec = dataclasses.replace(
            LocalExecutor(scratch).resolve(req),
            node=ray.get_runtime_context().get_node_id(),
            host=node_address(),
            elsewhere=RayElsewhere(peers) if peers else None,
        )
        record = run_trial(spec, scratch / req.workdir)  # built with its node and host
        workdir = scratch / req.workdir
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
