"""What a trial is before it runs: a checked assignment of knobs and patches at a scale, with
its capacity and timeout. Its own module, so the runner and the rooms it calls (classification,
evaluation) share it without importing one another."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from infrarsi.workloads import expr
from infrarsi.workloads.manifest import KnobValue, Manifest

if TYPE_CHECKING:
    from infrarsi.sandbox.remote import Elsewhere


MAX_TIMEOUT_FACTOR = 4.0  # a timed run of more steps may take this many times the scale's timeout


@dataclass(frozen=True)
class PatchSource:
    """A patch to apply: a catalog entry of the workload, or a diff file a user dropped in."""

    id: str
    path: Path
    catalog: bool


@dataclass(frozen=True)
class TrialSpec:
    """A trial that passed every check that can be made before running: ready to launch."""

    manifest: Manifest
    scale: str
    knobs: dict[str, KnobValue]
    patches: tuple[PatchSource, ...] = ()
    mem_cap_bytes: int | None = None
    timeout_s: float | None = None
    contract_hash: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    evaluate: bool = True  # False: skip the held-out evaluation (measurement-only benchmarks)
    slow_after_s: float | None = None  # the search's bound: cut short there, recorded slow
    # the time per step a trial cut at the bound is recorded at least (right-censored)
    censored_step_time_s: float | None = None
    seed: int | None = None  # a challenge seed the harness drew: every seed parameter takes it
    # the optimizer steps the harness asks for instead of the scale's (Apply's timed runs:
    # launch to exit over more steps, so the steps stand clear of start-up's noise)
    steps: int | None = None
    # where it runs, for its record: the cluster node's id and this host's address (a trial
    # run here: "local", no address); a spread trial's launchers record their own hosts
    node: str = "local"
    host: str | None = None
    # where launchers after the first run (``trial.remote.Elsewhere``); None: all here
    elsewhere: Elsewhere | None = field(default=None, compare=False, repr=False)

    @property
    def cut_after_s(self) -> float:
        """When the trial's processes are ended: the slow bound when it comes first, else the
        timeout."""
        if self.slow_after_s is not None and self.slow_after_s < self.effective_timeout_s:
            return self.slow_after_s
        return self.effective_timeout_s

    @property
    def effective_timeout_s(self) -> float:
        """The timeout given, or the scale preset's (for a run of more steps than the scale's,
        that many times longer, up to ``MAX_TIMEOUT_FACTOR`` times)."""
        if self.timeout_s:
            return self.timeout_s
        preset = self.manifest.scale(self.scale)
        longer = self.steps_to_run / max(1, int(preset.params["steps"]))
        return preset.timeout_s * min(MAX_TIMEOUT_FACTOR, max(1.0, longer))

    @property
    def steps_to_run(self) -> int:
        """The optimizer steps this trial runs: the harness's ``steps``, or the scale's."""
        return self.steps or int(self.manifest.scale(self.scale).params["steps"])

    def params(self) -> dict[str, KnobValue]:
        """Scale parameters and knobs together: the names templates and expressions may use
        (with a challenge ``seed``, every seed parameter set to it; with ``steps``, the
        scale's ``steps`` replaced)."""
        params = dict(self.manifest.scale(self.scale).params)
        if self.seed is not None:
            params.update({name: self.seed for name in seed_names(self.manifest, self.scale)})
        if self.steps is not None:
            params["steps"] = self.steps
        return {**params, **self.knobs}

    def tokens_per_step(self) -> int:
        """Tokens per optimizer step the workload fixes, from the manifest's invariant."""
        return int(expr.evaluate(self.manifest.invariants.tokens_per_step, self.params()))


def seed_names(manifest: Manifest, scale: str) -> list[str]:
    """The scale parameters that seed the workload (initialisation, data order): a name with
    ``seed`` in it, as the contract's invariants name them."""
    return [name for name in manifest.scale(scale).params if "seed" in name]


def challenge_seed() -> int:
    """A seed drawn now, for the harness to set (``TrialSpec.seed``), one of 2**31 - 2: unlike
    the contract's own, no patch can have prepared a stored result for it. The caller writes
    it nowhere a trial could read before it runs."""
    return secrets.randbelow(2**31 - 2) + 1
