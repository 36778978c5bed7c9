"""Checking a trial before anything runs: the knob assignment against the manifest's rules, each
patch (a catalog id or a diff file) found, screened for the files it may touch and for conflicts
with the others, the options a trial takes. ``prepare`` returns the ``TrialSpec`` a trial runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infrarsi.errors import InfraRSIError
from infrarsi.paths import read_text
from infrarsi.sandbox import memcg
from infrarsi.trial import patching
from infrarsi.trial.spec import PatchSource, TrialSpec
from infrarsi.workloads import knobs
from infrarsi.workloads.manifest import Manifest


def prepare(
    manifest: Manifest,
    scale: str,
    overrides: dict[str, Any] | None = None,
    patches: list[str] | tuple[str, ...] = (),
    **options: Any,
) -> TrialSpec:
    """Validate knobs (AssignmentError) and patches (PatchRefused) without running anything.

    Each patch is a catalog id of the workload or the path of a unified diff file.
    """
    manifest.scale(scale)
    _check_options(manifest=manifest, **options)
    assignment = knobs.resolve(manifest, scale, overrides or {})
    sources = tuple(patch_source(manifest, p) for p in patches)
    for source in sources:
        refuse_patch(manifest, source.path)
        if not source.catalog:  # a user's diff: it must fit the workload's files as they are
            _fits(manifest, source.path)
    _refuse_conflicts(manifest, sources)
    return TrialSpec(manifest, scale, assignment, sources, **options)


class CapacityUnavailable(ValueError):
    """A per-rank memory capacity was asked for where it cannot be enforced."""


def _check_options(
    mem_cap_bytes: int | None = None,
    timeout_s: float | None = None,
    steps: int | None = None,
    manifest: Manifest | None = None,
    **_: Any,
) -> None:
    """ValueError naming the option when a capacity, timeout or step count cannot be
    honoured."""
    if timeout_s is not None and not timeout_s > 0:
        raise InfraRSIError(f"timeout {timeout_s:g} s: give a positive number of seconds")
    if steps is not None and (steps < 1 or int(steps) != steps):
        raise InfraRSIError(f"steps {steps}: give a positive whole number of optimizer steps")
    if steps is not None and manifest is not None and not manifest.launch.passes_steps():
        raise InfraRSIError(
            f"{manifest.name} cannot run {steps} steps: its launch command has no {{steps}} "
            "field; pass the step count to the script as {steps} in the manifest"
        )
    if mem_cap_bytes is None:
        return
    if mem_cap_bytes <= 0:
        raise InfraRSIError(f"memory capacity {mem_cap_bytes} bytes: give a positive size")
    try:
        memcg.detect()
    except memcg.MemcgUnavailable as exc:
        raise CapacityUnavailable(
            f"a per-rank memory capacity needs a writable memory cgroup, "
            f"and {exc}; run without --mem-cap to measure the peak only"
        ) from None


def patch_source(manifest: Manifest, patch: str) -> PatchSource:
    """Resolve a catalog id or a diff file path; PatchRefused naming the catalog otherwise."""
    if any(p.id == patch for p in manifest.patches):
        return PatchSource(patch, manifest.patch_path(patch), catalog=True)
    path = Path(patch)
    if path.suffix in (".diff", ".patch") and path.is_file():
        # a user's diff keeps its file name (with the suffix): never mistaken for a catalog id
        return PatchSource(path.name, path.resolve(), catalog=False)
    raise patching.PatchRefused(
        f"unknown patch {patch!r}: give a catalog id of {manifest.name} "
        f"({', '.join(p.id for p in manifest.patches)}) or a .diff file"
    )


def refuse_patch(manifest: Manifest, diff_file: Path) -> None:
    """PatchRefused naming every reason the diff may not be applied to this workload."""
    reasons = patching.check_paths(
        read_text(diff_file, "patch"), manifest.root, manifest.files.editable, manifest.files.locked
    )
    if reasons:
        raise patching.PatchRefused(f"patch {Path(diff_file).name} refused: {'; '.join(reasons)}")


def _fits(manifest: Manifest, diff_file: Path) -> None:
    """PatchRefused when the diff does not apply to the workload's own files (a patch made
    for another version of them), with git's reason: said before any trial, never a crash."""
    problem = patching.does_not_apply(diff_file, manifest.root)
    if problem:
        raise patching.PatchRefused(
            f"patch {Path(diff_file).name} does not apply to {manifest.name} "
            f"({manifest.root}): {problem}; make it against these files (git diff)"
        )


def _refuse_conflicts(manifest: Manifest, sources: tuple[PatchSource, ...]) -> None:
    ids = [s.id for s in sources]
    if len(set(ids)) != len(ids):
        raise patching.PatchRefused(f"a patch is listed twice: {ids}")
    for source in sources:
        if source.catalog:
            clash = set(manifest.patch(source.id).conflicts) & set(ids)
            if clash:
                raise patching.PatchRefused(f"patch {source.id} conflicts with {sorted(clash)}")
