"""Where workloads are found: the reference workloads bundled with InfraRSI, or a path."""

from __future__ import annotations

from pathlib import Path

from infrarsi.workloads.manifest import Manifest, ManifestError, load_manifest

REFERENCE_DIR = Path(__file__).resolve().parent.parent / "reference"


def reference_names() -> list[str]:
    """Names of the bundled reference workloads."""
    return sorted(p.parent.name for p in REFERENCE_DIR.glob("*/workload.yaml"))


def find(name_or_path: str) -> Manifest:
    """A bundled workload by name, or a manifest by path (file or folder)."""
    if (REFERENCE_DIR / name_or_path / "workload.yaml").is_file():
        return load_manifest(REFERENCE_DIR / name_or_path)
    path = Path(name_or_path)
    if path.exists():
        return load_manifest(path)
    raise ManifestError(
        f"no workload {name_or_path!r}: give a bundled name "
        f"({', '.join(reference_names())}) or a path to a workload.yaml"
    )


def all_reference() -> list[Manifest]:
    """Every bundled reference workload, validated."""
    return [find(name) for name in reference_names()]


def is_reference(manifest: Manifest) -> bool:
    """True for a bundled reference workload."""
    return manifest.root.resolve().parent == REFERENCE_DIR
