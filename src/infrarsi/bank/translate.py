"""How a config measured on one host reads on another: its rank count per node scaled with the
host's parallel units (cores on a CPU, devices on a GPU node).

A past run's best config is rarely best elsewhere *as written*: what made it fast on a 2-core
host was two ranks, one per core — on a 1-core host that is one rank, not two ranks fighting
for one core; eight ranks on an 8-GPU node are four on a 4-GPU node. So before the bank fits
its models and picks its seeds, every experience's knobs with role ``ranks`` (ranks per node)
are scaled by the ratio of this host's parallel units per node to its source host's (its cores
shared by the workload's nodes that ran there, at least one), and the knobs that
derive from them (the accumulation steps at a fixed global batch) are derived again. Threads
per rank stay: ranks and cores scale together.

A rank count that does not scale to a whole number (one rank on 2 cores, read on 1 core) is
kept as the fraction: it names no config here, so the experience still informs the models
about its other knobs but is no seed — rounding it would merge it with another config's
outcomes (two ranks on 2 cores, read on 1 core, is that one rank). Neither is a scaled config
this workload does not allow (8 ranks' share of a 4-sequence batch). Where either host's units
are unknown, or the experience is another workload's, its knobs are read as measured.
"""

from __future__ import annotations

from collections.abc import Callable

from infrarsi.workloads import knobs as knob_rules
from infrarsi.workloads.knobs import AssignmentError

# (knobs measured, their host's hardware signature) -> (knobs here, a config that runs here)
Translate = Callable[[dict, dict], tuple[dict, bool]]


def parallel_units(hardware: dict) -> float | None:
    """The parallel units one node of the workload had, from its host's hardware signature:
    the host's GPUs on a CUDA host, else its cores, shared by the nodes that ran on it
    (``nodes_per_host``; a signature without it ran all its ``nodes`` there, as the local
    executor does) and never less than one — a node runs at least one rank, so where several
    nodes share fewer cores, one rank per node is the floor, not a choice to scale. None when
    the signature does not say."""
    if hardware.get("device_type") == "cuda":
        units = hardware.get("device_count")
    else:
        units = hardware.get("cores")
    if not isinstance(units, (int, float)) or units <= 0:
        return None
    shared = hardware.get("nodes_per_host") or hardware.get("nodes") or 1
    return max(1.0, float(units) / shared)


def scaled_ranks(value, ratio: float):
    """A rank count scaled by ``ratio``: an int where the product is whole, else the fraction;
    a value that is not a count is returned as it is."""
    if isinstance(value, bool):
        return value
    try:
        number = float(value) * ratio
    except (TypeError, ValueError):
        return value
    return int(round(number)) if abs(number - round(number)) < 1e-9 else number


def translator(manifest, scale: str, hardware: dict) -> Translate:
    """``translate(knobs, source_hardware)``: an experience's knobs as they read on the host
    of ``hardware`` for this workload at ``scale``, and whether they are a config that runs
    here (see the module's docstring)."""
    ranks = set(manifest.knobs_with_role("ranks"))
    derived = {k.name for k in manifest.knobs if k.derive is not None}
    names = {k.name for k in manifest.knobs}
    here = parallel_units(hardware)
    cache: dict[tuple, tuple[dict, bool]] = {}

    def translate(measured: dict, source_hardware: dict) -> tuple[dict, bool]:
        there = parallel_units(source_hardware or {})
        if (
            not here
            or not there
            or here == there
            or not ranks & set(measured)
            or not set(measured) <= names
        ):
            return measured, True
        key = (tuple(sorted((k, str(v)) for k, v in measured.items())), here / there)
        if key not in cache:
            cache[key] = _rescaled(measured, here / there)
        return cache[key]

    def _rescaled(measured: dict, ratio: float) -> tuple[dict, bool]:
        free = {
            k: (scaled_ranks(v, ratio) if k in ranks else v)
            for k, v in measured.items()
            if k not in derived
        }
        try:
            return dict(knob_rules.resolve(manifest, scale, free)), True
        except (AssignmentError, ValueError):
            return free, False

    return translate
