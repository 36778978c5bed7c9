"""Executors run trials: submit a request, poll for its record, cancel it.

A ``TrialRequest`` is plain data (JSON-serialisable, paths relative to the executor's workspace
root, or bundled workload names), so the same request can later travel to a Ray worker. The
``LocalExecutor`` runs one timed trial at a time on this machine: co-located trials disturb each
other's timing, so a second submission waits for the first to end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from infrarsi.contract import Contract
from infrarsi.identity import Configuration
from infrarsi.records.base import Configured
from infrarsi.trial import TrialRecord, TrialSpec, prepare, run_trial
from infrarsi.workloads import find
from infrarsi.workloads.manifest import Manifest


class TrialCancelled(RuntimeError):
    """Polled a trial that was cancelled before it started."""


class TrialRequest(BaseModel, Configured):
    """One trial to run, as data: what any executor needs and nothing local to one machine —
    a configuration (``.configuration``: the proposal it carries, by ``config_key``'s identity)
    and where and how to run it."""

    workload: str = Field(
        description="a bundled workload name or a manifest path relative to the workspace root"
    )
    scale: str
    knobs: dict[str, Any]
    patches: list[str] = Field([], description="catalog ids or diff paths (relative)")
    mem_cap_bytes: int | None = None
    timeout_s: float | None = None
    contract_hash: str | None = None
    workdir: str = Field("trials", description="where trial folders go, relative to the root")
    extra_env: dict[str, str] = Field(
        {}, description="environment the harness adds (e.g. the Doctor's profiled step)"
    )
    evaluate: bool = Field(True, description="False: no held-out evaluation (benchmarks)")
    slow_after_s: float | None = Field(
        None,
        description="the search's bound: a trial still running then is cut short and recorded slow",
    )
    censored_step_time_s: float | None = Field(
        None,
        description="with the bound: the time per step a trial cut there is recorded at least "
        "(right-censored)",
    )
    seed: int | None = Field(
        None, description="a challenge seed: every seed parameter of the workload takes it"
    )
    steps: int | None = Field(
        None,
        description="optimizer steps instead of the scale's (Apply's timed runs); None: the "
        "scale's",
    )

    @classmethod
    def of(cls, contract: Contract, configuration: Configuration, **launch: Any) -> TrialRequest:
        """A trial of ``contract``'s workload and scale under ``configuration``, capped at the
        contract's capacity and naming its hash; ``launch``: the other fields (where trial
        folders go, a challenge seed, a bound, the steps; ``mem_cap_bytes`` to override)."""
        fields: dict[str, Any] = {
            "workload": contract.workload_path or contract.workload,
            "scale": contract.scale,
            "knobs": configuration.knob_dict,
            "patches": sorted(configuration.patches),
            "mem_cap_bytes": contract.mem_cap_bytes,
            "contract_hash": contract.contract_hash,
        }
        return cls(**{**fields, **launch})


# the request's fields a trial spec takes as they are (``prepare``'s options): those both
# declare, but what ``prepare`` is given in its own place
SPEC_OPTIONS = (
    {f.name for f in dataclasses.fields(TrialSpec)} & set(TrialRequest.model_fields)
) - {"scale", "knobs", "patches"}


class Executor:
    """submit / poll / cancel; subclasses decide where trials run."""

    def submit(self, request: TrialRequest) -> str:
        """Queue a trial; returns a handle."""
        raise NotImplementedError

    def poll(self, handle: str) -> TrialRecord | None:
        """The trial's record once it ended, None while it is queued or running."""
        raise NotImplementedError

    def cancel(self, handle: str) -> bool:
        """Drop a trial that has not started (True); a started one runs to its end (False)."""
        raise NotImplementedError

    @contextlib.contextmanager
    def pinned(self, manifest: Manifest | None = None) -> Iterator[Executor]:
        """An executor whose trials (of ``manifest``'s workload) all run on the same hosts for
        as long as the block lasts: what an interleaved comparison of times needs (here: this
        one; a cluster's holds its nodes)."""
        yield self

    def close(self) -> None:
        """Give back what the executor holds between trials (nothing, unless it says so)."""

    def run(self, request: TrialRequest) -> TrialRecord:
        """Submit one trial and wait for its record: what a stage that runs one trial at a
        time (the Doctor, ``infrarsi trial``) calls."""
        return self.wait(self.submit(request))

    def wait(self, handle: str, poll_s: float = 0.2) -> TrialRecord:
        """Block until the trial ends."""
        import time

        while True:
            record = self.poll(handle)
            if record is not None:
                return record
            time.sleep(poll_s)


@dataclasses.dataclass
class _Job:
    """One submitted trial: its thread, and its record or the error that ended it."""

    record: TrialRecord | None = None
    error: BaseException | None = None
    cancelled: bool = False
    started: bool = False
    thread: threading.Thread | None = None


class LocalExecutor(Executor):
    """Runs trials on this machine, one at a time, in submission order."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self._lock = threading.Lock()  # one timed trial at a time
        self._jobs: dict[str, _Job] = {}
        self._next = 0

    def resolve(self, request: TrialRequest) -> TrialSpec:
        """The prepared trial spec of a request (AssignmentError / PatchRefused when invalid)."""
        workload = request.workload
        path = self.root / workload
        manifest = find(str(path) if path.exists() else workload)
        patches = [str(self.root / p) if (self.root / p).is_file() else p for p in request.patches]
        options = request.model_dump(include=SPEC_OPTIONS)
        return prepare(manifest, request.scale, request.knobs, patches, **options)

    def submit(self, request: TrialRequest) -> str:
        spec = self.resolve(request)  # a bad request fails here, in the caller
        handle = f"local-{self._next}"
        self._next += 1
        job = self._jobs[handle] = _Job()
        workdir = self.root / request.workdir
        job.thread = threading.Thread(target=self._run, args=(job, spec, workdir), daemon=True)
        job.thread.start()
        return handle

    def _run(self, job: _Job, spec: TrialSpec, workdir: Path) -> None:
        with self._lock:
            if job.cancelled:
                return
            job.started = True
            try:
                job.record = run_trial(spec, workdir)
            except BaseException as exc:  # surfaced by poll, never lost in the thread
                job.error = exc

    def run(self, request: TrialRequest) -> TrialRecord:
        """One trial in the calling thread (after any submitted one): a stop signal that
        reaches the caller ends the trial there and still leaves its record, as ``run_trial``
        does, and the trial's processes die with that thread."""
        spec = self.resolve(request)
        with self._lock:
            return run_trial(spec, self.root / request.workdir)

    def wait(self, handle: str, poll_s: float = 0.2) -> TrialRecord:
        """Block until the trial ends (joins its thread: no polling delay)."""
        thread = self._jobs[handle].thread
        if thread is not None:
            thread.join()
        return super().wait(handle, poll_s)

    def poll(self, handle: str) -> TrialRecord | None:
        job = self._jobs[handle]
        if job.error is not None:
            raise job.error
        if job.cancelled:
            raise TrialCancelled(f"trial {handle} was cancelled before it started")
        return job.record

    def cancel(self, handle: str) -> bool:
        job = self._jobs[handle]
        if job.started:
            return False
        job.cancelled = True
        return True
