"""The next round's workload: a copy of this one with the promoted winner built in — its patches
applied, its knob values as the scale's defaults — and the catalog cut to the patches that
still apply. ``optimize --rounds`` searches again from there."""

from __future__ import annotations

from pathlib import Path

import yaml

from infrarsi.identity import canonical_value
from infrarsi.trial import patching, prepare
from infrarsi.workloads import Manifest, find
from infrarsi.workloads import knobs as knob_rules
from infrarsi.workloads.folder import copy_workload


def derive_workload(manifest: Manifest, scale: str, winner: dict, dest: Path) -> Manifest:
    """Write the derived workload into ``dest`` (which must not exist) and load it."""
    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} exists: a derived workload is written once")
    spec = prepare(manifest, scale, winner["knobs"], winner["patches"])
    copy_workload(manifest.root, dest)
    for source in spec.patches:
        patching.apply(source.path, dest)
    raw = yaml.safe_load((manifest.path).read_text())
    round_no = _next_round(manifest.name)
    raw["name"] = f"{_stem(manifest.name)}-r{round_no}"
    raw["description"] = (
        f"{manifest.description.strip()} Round {round_no}: the promoted "
        f"winner built in (patches {', '.join(winner['patches']) or 'none'}; "
        "its knob values as defaults)."
    )
    defaults = dict(raw["scales"][scale].get("knob_defaults", {}))
    base = knob_rules.baseline(manifest, scale)
    for knob in manifest.knobs:
        value = winner["knobs"].get(knob.name)
        if value is None or knob.derive is not None:
            continue
        if canonical_value(value) != canonical_value(base[knob.name]):
            defaults[knob.name] = value
    raw["scales"][scale]["knob_defaults"] = defaults
    applied = set(winner["patches"])
    kept = [
        p
        for p in raw.get("patches", [])
        if p["id"] not in applied and patching.applies(dest / p["file"], dest)
    ]
    kept_ids = {p["id"] for p in kept}
    for p in kept:
        p["conflicts"] = [c for c in p.get("conflicts", []) if c in kept_ids]
    raw["patches"] = kept
    (dest / manifest.path.name).write_text(yaml.safe_dump(raw, sort_keys=False))
    return find(str(dest / manifest.path.name))


def _stem(name: str) -> str:
    head, _, tail = name.rpartition("-r")
    return head if head and tail.isdigit() else name


def _next_round(name: str) -> int:
    head, _, tail = name.rpartition("-r")
    return int(tail) + 1 if head and tail.isdigit() else 2
