"""What an experience was measured under, and how far two of them lie apart.

**Hardware signature**: device kind, model and count, cores, per-rank capacity, ISA flags, the
measured peak FLOP/s per precision, memory and interconnect bandwidth, ranks per node, nodes and
how many of them shared one host (``nodes_per_host``: a multi-node workload launched on one
machine runs every "node" on its cores), and the torch version — from the Doctor's hardware
probe, so two hosts are compared by what they measured, not by their names.

**Workload signature**: family (dense or MoE), parameter count, layers, width, sequence length,
experts and top-k, world size and global batch — read from the scale's parameters under the
names training scripts use for them (``n_layer`` / ``num_layers`` / ...), the parameter count
from the manifest's FLOPs per token (6 per parameter) when it has one.

**Distance** (documented in :data:`HARDWARE_WEIGHTS` and :data:`WORKLOAD_WEIGHTS`): a weighted
sum of gaps, each 0 for equal values — for a number the absolute log ratio (1.0 = a factor of
e), for a name or a family 1 when they differ, for ISA flags the Jaccard distance; a field
known on one side only costs :data:`UNKNOWN_GAP`. The similarity that weights a past outcome is
``exp(-(hardware distance + workload distance))``: 1 for the same host and workload, ~0.37 one
unit away. A field that bears only on what a config runs counts only for a config that runs it
(:data:`LOW_PRECISION_FIELDS`: how fast bf16 is next to fp32 tells nothing about an fp32
config's outcome — a host with AMX and one that emulates bf16 differ by ~6.5 there, which would
otherwise make every fp32 outcome of one worthless to the other).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter

from infrarsi.identity import canonical_value

UNKNOWN_GAP = 0.35

# field -> (weight, kind): kind "log" (positive numbers), "same" (equal or not), "set" (Jaccard)
HARDWARE_WEIGHTS = {
    "device_type": (3.0, "same"),  # cpu vs cuda: nothing carries over with certainty
    "device": (0.5, "same"),  # the CPU or GPU model
    "device_count": (0.5, "log"),
    "cores": (1.0, "log"),  # on a CPU the best rank and thread counts follow it
    "capacity_per_rank_bytes": (0.5, "log"),
    "isa": (0.5, "set"),
    "peak_flops_fp32": (1.0, "log"),
    "bf16_over_fp32": (1.0, "log"),  # where bf16 is emulated this is ~0.01, with AMX ~6
    "memory_bandwidth_bytes_per_s": (0.5, "log"),
    "interconnect_bytes_per_s": (0.5, "log"),
    "ranks_per_node": (0.5, "log"),
    "nodes": (0.5, "log"),
    "torch": (0.25, "same"),  # major.minor
}
WORKLOAD_WEIGHTS = {
    "family": (3.0, "same"),
    "parameters": (1.0, "log"),
    "layers": (0.5, "log"),
    "width": (0.5, "log"),
    "seq_len": (0.5, "log"),
    "experts": (0.5, "log"),
    "top_k": (0.25, "log"),
    "world_size": (0.5, "log"),
    "global_batch": (0.5, "log"),
}
# hardware fields that bear only on a config run in a 16-bit float precision
LOW_PRECISION_FIELDS = ("bf16_over_fp32",)
LOW_PRECISION_WORDS = ("half", "mixed", "amp")  # values that name one without a "16"
# the names a scale's parameters go by in training scripts
ALIASES = {
    "layers": ("n_layer", "n_layers", "num_layers", "num_hidden_layers", "layers", "depth"),
    "width": ("n_embd", "hidden_size", "d_model", "dim", "width", "embed_dim", "n_embed"),
    "seq_len": (
        "seq_len",
        "block_size",
        "max_seq_len",
        "seq_length",
        "context_length",
        "sequence_length",
        "max_length",
    ),
    "experts": ("n_experts", "num_experts", "experts", "num_local_experts", "n_expert"),
    "top_k": ("top_k", "topk", "num_experts_per_tok", "moe_top_k", "k_experts"),
    "global_batch": ("global_batch_seqs", "global_batch", "global_batch_size", "batch_size"),
    "vocab": ("vocab_size", "n_vocab", "vocab"),
}


def hardware_signature(
    hardware: dict,
    capacity_bytes: float | None = None,
    ranks_per_node: int | None = None,
    nodes: int | None = None,
    nodes_per_host: int | None = None,
) -> dict:
    """The signature of the host a Doctor probed (``probe_hardware``'s dict); ``nodes_per_host``:
    how many of the workload's nodes ran on that host (``launchers_per_host``)."""
    facts = hardware.get("facts", {})
    peaks = hardware.get("peak_flops", {}) or {}
    fp32, bf16 = peaks.get("fp32"), peaks.get("bf16")
    cuda = facts.get("device_type") == "cuda"
    return {
        "fingerprint": hardware.get("fingerprint"),
        "device_type": facts.get("device_type"),
        "device": facts.get("gpu") if cuda else facts.get("cpu"),
        "device_count": facts.get("gpu_count") if cuda else 1,
        "cores": facts.get("cores"),
        "capacity_per_rank_bytes": capacity_bytes,
        "isa": sorted(facts.get("isa") or []),
        "peak_flops_fp32": fp32,
        "peak_flops_bf16": bf16,
        "bf16_over_fp32": bf16 / fp32 if fp32 and bf16 else None,
        "memory_bandwidth_bytes_per_s": hardware.get("memory_bandwidth_bytes_per_s"),
        "interconnect_bytes_per_s": (hardware.get("comm") or {}).get("allreduce_bus_bytes_per_s"),
        "ranks_per_node": ranks_per_node,
        "nodes": nodes,
        "nodes_per_host": nodes_per_host,
        "torch": ".".join(str(facts.get("torch") or "").split(".")[:2]) or None,
    }


def launchers_per_host(nodes: int, launcher_nodes: list[str] | None) -> int:
    """How many of a trial's ``nodes`` launchers shared one host: all of them when its record
    names no node per launcher (they ran where the trial ran), else the most on one node."""
    if not launcher_nodes:
        return nodes
    return max(Counter(launcher_nodes).values())


def workload_signature(
    manifest, scale: str, knobs: dict, flops_per_token: float | None = None
) -> dict:
    """The signature of a workload at a scale with its baseline knobs."""
    params = {k.lower(): v for k, v in manifest.scale(scale).params.items()}
    pick = {field: _first(params, names) for field, names in ALIASES.items()}
    names = {k.name.lower() for k in manifest.knobs} | set(params)
    moe = pick["experts"] is not None or any("expert" in n for n in names)
    ranks = next((knobs.get(k) for k in manifest.knobs_with_role("ranks")), None)
    nodes = manifest.launch.nodes
    world = int(ranks) * nodes if isinstance(ranks, (int, float)) else None
    if flops_per_token is None and manifest.flops is not None:
        try:
            from infrarsi.workloads import expr

            flops_per_token = float(
                expr.evaluate(manifest.flops.per_token, {**manifest.scale(scale).params, **knobs})
            )
        except Exception:  # a formula over knobs this assignment lacks: left unknown
            flops_per_token = None
    parameters = flops_per_token / 6 if flops_per_token else _param_estimate(pick)
    return {
        "name": manifest.name,
        "scale": scale,
        "family": "moe" if moe else "dense",
        "parameters": parameters,
        "layers": pick["layers"],
        "width": pick["width"],
        "seq_len": pick["seq_len"],
        "experts": pick["experts"],
        "top_k": pick["top_k"],
        "world_size": world,
        "global_batch": pick["global_batch"],
        "nodes": nodes,
    }


def _first(params: dict, names: tuple[str, ...]) -> float | None:
    for name in names:
        value = params.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    return None


def _param_estimate(pick: dict) -> float | None:
    """A decoder's parameters from its shape (12 L d^2 + V d) when no FLOPs formula says."""
    layers, width = pick["layers"], pick["width"]
    if not layers or not width:
        return None
    return 12 * layers * width * width + (pick["vocab"] or 0) * width


def signature_fp(signature: dict) -> str:
    """A short hash of a signature (the bank indexes experiences by it)."""
    return hashlib.sha256(json.dumps(signature, sort_keys=True, default=str).encode()).hexdigest()[
        :16
    ]


def distance(a: dict, b: dict, weights: dict) -> float:
    """The weighted sum of the gaps between two signatures (see the module's docstring)."""
    total = 0.0
    for field, (weight, kind) in weights.items():
        x, y = a.get(field), b.get(field)
        if x is None and y is None:
            continue
        if x is None or y is None:
            total += weight * UNKNOWN_GAP
        elif kind == "log":
            total += weight * (
                abs(math.log(float(x) / float(y))) if float(x) > 0 and float(y) > 0 else UNKNOWN_GAP
            )
        elif kind == "set":
            union = set(x) | set(y)
            total += weight * (len(set(x) ^ set(y)) / len(union) if union else 0.0)
        else:
            total += weight * (canonical_value(x) != canonical_value(y))
    return total


def hardware_distance(a: dict, b: dict, low_precision: bool = True) -> float:
    """How far two hosts lie apart (0: alike in every measured respect) for a config that
    runs in a 16-bit float precision, or (``low_precision=False``) for one that does not."""
    weights = (
        HARDWARE_WEIGHTS
        if low_precision
        else {f: w for f, w in HARDWARE_WEIGHTS.items() if f not in LOW_PRECISION_FIELDS}
    )
    return distance(a, b, weights)


def low_precision_reader(manifest):
    """``runs_low_precision(knobs)``: whether a config of ``manifest``'s workload runs in a
    16-bit float precision — a knob of role ``precision`` set to true (a ``--bf16`` switch) or
    to a value naming one (``bf16``, ``float16``, ``bf16-mixed``, ``half``, ...). Without a
    manifest (another workload's experience) every config is taken to."""
    names = set(manifest.knobs_with_role("precision")) if manifest is not None else None

    def runs_low_precision(knobs: dict) -> bool:
        if names is None:
            return True
        for name in names & set(knobs):
            value = knobs[name]
            text = str(value).strip().lower()
            if value is True or "16" in text or text in LOW_PRECISION_WORDS:
                return True
        return False

    return runs_low_precision


def workload_distance(a: dict, b: dict) -> float:
    """How far two workloads lie apart (0: the same shape and batch)."""
    return distance(a, b, WORKLOAD_WEIGHTS)


def similarity(hw_a: dict, wl_a: dict, hw_b: dict, wl_b: dict, low_precision: bool = True) -> float:
    """The weight a past outcome gets here: ``exp(-(hardware + workload distance))``, the
    hardware distance for a config that runs low precision or not (``hardware_distance``)."""
    return math.exp(-(hardware_distance(hw_a, hw_b, low_precision) + workload_distance(wl_a, wl_b)))
