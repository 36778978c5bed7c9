"""One trial, start to end: the only place a trial's lifecycle lives and every outcome is sorted.

``preparation.prepare`` checks the knob assignment and the patches before anything runs;
``run_trial`` makes a fresh workspace copy, applies the patches, hashes the locked files and
hands the trial to ``launch`` (the workload in the sandbox, with a timeout and a per-rank memory
capacity, its outcome classified into exactly one status and its parameters evaluated); the
record is written whatever happens, an interruption included.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from infrarsi.host import host_fingerprint
from infrarsi.paths import sha256_file
from infrarsi.records.trial import PatchRef, TrialBase, TrialRecord, TrialStatus
from infrarsi.sandbox.process import (
    sweep_orphans,
)
from infrarsi.trial import patching
from infrarsi.trial.launch import isolation, launch, seed_setting
from infrarsi.trial.screen import screen
from infrarsi.trial.spec import TrialSpec
from infrarsi.workloads.folder import copy_workload
from infrarsi.workloads.manifest import Manifest


def new_trial_id(manifest: Manifest) -> str:
    """A unique, sortable trial id."""
    return f"{manifest.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def run_trial(spec: TrialSpec, workdir: Path) -> TrialRecord:
    """Run one prepared trial in a fresh workspace under ``workdir``; always returns a record."""
    t0, started = time.monotonic(), time.time()
    swept = sweep_orphans()
    trial_id = new_trial_id(spec.manifest)
    trial_dir = Path(workdir).resolve() / trial_id
    workspace = trial_dir / "workspace"
    base = _base(spec, trial_id, trial_dir, started)
    copy_workload(spec.manifest.root, workspace)
    locked, problem = _apply_and_hash(spec, workspace)
    base = base.model_copy(update={"patches": _patch_refs(spec), "locked_files": locked})
    if problem is not None:
        status, error = problem
        record = base.record(status=status, error=error, cost_s=time.monotonic() - t0)
    else:
        swept_warnings = (
            [
                f"{swept} process(es) of earlier trials whose tool was "
                "killed were still running; they were killed first"
            ]
            if swept
            else []
        )
        try:
            record = launch(spec, trial_dir, workspace, base, t0, swept_warnings)
        except BaseException as exc:  # the tool is stopped: the trial's processes are gone
            base.record(
                status=TrialStatus.CRASH,
                cost_s=time.monotonic() - t0,
                error=f"interrupted: the tool was stopped ({type(exc).__name__}) "
                "and ended the trial",
            ).save(trial_dir / "record.json")
            raise
    record.save(trial_dir / "record.json")
    return record


def _base(spec: TrialSpec, trial_id: str, trial_dir: Path, started: float) -> TrialBase:
    """What the record says of the trial before it runs: what was asked, where and when."""
    return TrialBase(
        trial_id=trial_id,
        workload=spec.manifest.name,
        scale=spec.scale,
        knobs=spec.knobs,
        contract_hash=spec.contract_hash,
        mem_cap_bytes=spec.mem_cap_bytes,
        timeout_s=spec.effective_timeout_s,
        slow_after_s=spec.slow_after_s,
        started_unix_s=started,
        trial_dir=str(trial_dir),
        fingerprint=host_fingerprint(),
        node=spec.node,
        hosts=[spec.host] if spec.host else [],
        seed=spec.seed,
        steps=spec.steps,
        seed_set_by=seed_setting(spec),
        isolation=isolation(),
    )


def _patch_refs(spec: TrialSpec) -> list[PatchRef]:
    """What the record says of each patch: its id, hash, catalog, the files it touches and what
    the static screen flagged in it."""
    return [
        PatchRef(
            id=p.id,
            sha256=sha256_file(p.path),
            catalog=p.catalog,
            paths=list(patching.diff_paths(p.path.read_text()).paths),
            flags=[str(f) for f in screen(p.path.read_text())],
        )
        for p in spec.patches
    ]


def _apply_and_hash(
    spec: TrialSpec, workspace: Path
) -> tuple[dict[str, str], tuple[TrialStatus, str] | None]:
    """Apply the patches, hash the locked files; (hashes, None) or (hashes, (status, error))."""
    try:
        for source in spec.patches:
            patching.apply(source.path, workspace)
    except patching.PatchFailed as exc:
        return locked_hashes(spec.manifest, workspace), (TrialStatus.CRASH, str(exc))
    locked = locked_hashes(spec.manifest, workspace)
    original = locked_hashes(spec.manifest, spec.manifest.root)
    changed = sorted(p for p in original if locked.get(p) != original[p])
    if changed:
        return locked, (TrialStatus.INVALID, f"locked files changed: {changed}")
    return locked, None


def locked_hashes(manifest: Manifest, root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` matching the manifest's locked globs."""
    out = {}
    for path in sorted(Path(root).rglob("*")):
        rel = path.relative_to(root).as_posix()
        if (
            path.is_file()
            and "__pycache__" not in rel
            and patching.matches(rel, manifest.files.locked)
        ):
            out[rel] = sha256_file(path)
    return out
