"""Workloads: manifests, knob assignments, and the bundled reference workloads."""

from infrarsi.workloads.knobs import (
    AssignmentError,
    baseline,
    change_kinds,
    parse_assignments,
    precision_of,
    resolve,
)
from infrarsi.workloads.manifest import Manifest, ManifestError, load_manifest
from infrarsi.workloads.registry import all_reference, find, reference_names

__all__ = [
    "AssignmentError",
    "Manifest",
    "ManifestError",
    "all_reference",
    "baseline",
    "change_kinds",
    "find",
    "load_manifest",
    "parse_assignments",
    "precision_of",
    "reference_names",
    "resolve",
]
