"""Which catalog patches do not apply together: found once per run by applying every pair to a
scratch copy of the workload (no trial needed), so the search never proposes such a pair."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

from infrarsi.trial import patching
from infrarsi.workloads.folder import copy_workload
from infrarsi.workloads.manifest import Manifest


def incompatible_pairs(manifest: Manifest) -> set[frozenset[str]]:
    """Pairs of catalog patch ids that fail to apply one after the other (either order)."""
    out = set()
    ids = [p.id for p in manifest.patches]
    with tempfile.TemporaryDirectory(prefix="infrarsi-compat-") as scratch:
        for a, b in itertools.combinations(ids, 2):
            if b in manifest.patch(a).conflicts or a in manifest.patch(b).conflicts:
                continue  # declared: never proposed anyway
            if not _apply_together(manifest, [a, b], Path(scratch) / f"{a}+{b}"):
                out.add(frozenset((a, b)))
    return out


def _apply_together(manifest: Manifest, ids: list[str], workspace: Path) -> bool:
    copy_workload(manifest.root, workspace)
    try:
        for patch_id in ids:
            patching.apply(manifest.patch_path(patch_id), workspace)
        return True
    except patching.PatchFailed:
        return False
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
