"""From a workload, a scale and a reading of the instruction to a sealed task contract.

The invariants come from the workload's baseline at that scale, never from the instruction: the
person says what they want, the workload says what must stay the same.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from infrarsi.contract import (
    Budget,
    Contract,
    Correctness,
    Invariants,
    manifest_sha256,
    workload_path,
)
from infrarsi.init.parse import Reading
from infrarsi.paths import sha256_file
from infrarsi.trial.patching import matches
from infrarsi.trial.spec import TrialSpec
from infrarsi.workloads import baseline
from infrarsi.workloads.manifest import Manifest


def workload_files(manifest: Manifest) -> list[str]:
    """The workload's own files, relative paths (catalog patches and caches left out)."""
    out = []
    for path in sorted(manifest.root.rglob("*")):
        rel = path.relative_to(manifest.root).as_posix()
        if path.is_file() and not rel.startswith("patches/") and "__pycache__" not in rel:
            out.append(rel)
    return out


def make_contract(
    manifest: Manifest, scale: str, instruction: str, reading: Reading, drafted_by: str = "rules"
) -> Contract:
    """A sealed contract: the reading's wishes on top of the workload's baseline invariants."""
    files = workload_files(manifest)
    locked_files = [f for f in files if matches(f, manifest.files.locked) or f in reading.lock]
    editable = [
        g for g in manifest.files.editable if not any(matches(f, [g]) for f in reading.lock)
    ]
    contract = Contract(
        workload=manifest.name,
        workload_path=workload_path(manifest),
        manifest_sha256=manifest_sha256(manifest),
        scale=scale,
        instruction=instruction,
        objective=reading.objective or "e2e_time",
        invariants=baseline_invariants(manifest, scale),
        correctness=Correctness(
            loss_tolerance=reading.loss_tolerance or manifest.invariants.loss_rtol,
            loss_tolerance_bf16=reading.loss_tolerance or manifest.invariants.rtol("bf16"),
        ),
        mem_cap_bytes=reading.mem_cap_bytes,
        editable=editable,
        locked={f: sha256_file(manifest.root / f) for f in locked_files},
        budget=Budget(trials=reading.budget_trials, wall_time_s=reading.budget_wall_time_s),
        not_understood=reading.not_understood,
        drafted_by=drafted_by,
    )
    return contract.sealed()


def baseline_invariants(manifest: Manifest, scale: str) -> Invariants:
    """Tokens per step, steps, seeds and a data fingerprint of the baseline at ``scale``."""
    spec = TrialSpec(manifest, scale, baseline(manifest, scale))
    params = manifest.scale(scale).params
    seeds = {k: int(v) for k, v in params.items() if "seed" in k}
    data_files = [
        f
        for f in workload_files(manifest)
        if matches(f, manifest.files.locked) and "data" in Path(f).name
    ]
    digest = hashlib.sha256(json.dumps(seeds, sort_keys=True).encode())
    for rel in data_files:
        digest.update(rel.encode() + sha256_file(manifest.root / rel).encode())
    return Invariants(
        tokens_per_step=spec.tokens_per_step(),
        steps=int(params["steps"]),
        seeds=seeds,
        data_fingerprint=digest.hexdigest(),
    )
