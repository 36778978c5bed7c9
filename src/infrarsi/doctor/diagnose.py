"""From measurements to a ranked diagnosis: each finding with its evidence (numbers) and the knobs
and catalog patches that address it. Rules only name knobs and patches the workload has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from infrarsi.workloads.manifest import Manifest

ATTENTION_OPS = {"aten::softmax", "aten::_softmax", "aten::masked_fill", "aten::masked_fill_",
                 "aten::_softmax_backward_data", "aten::eq"}
DISPATCH_OPS = {"aten::nonzero", "aten::index", "aten::index_put_", "aten::_index_put_impl_",
                "aten::any", "aten::index_add_", "aten::masked_select"}
MATMUL_OPS = {"aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::linear"}
COMM_KNOBS = ("accum_no_sync", "ddp_bucket_mb", "gradient_as_bucket_view",
              "reshard_after_forward", "a2a_chunks", "expert_parallel")


@dataclass
class Finding:
    """One diagnosed waste: what, the numbers behind it, what to try; ``share`` ranks it."""
    finding: str
    evidence: str
    suggests: list[str]
    share: float = field(default=0.0, repr=False)

    def as_dict(self) -> dict:
        return {"finding": self.finding, "evidence": self.evidence, "suggests": self.suggests,
                "share_of_step": round(self.share, 4)}


@dataclass
class Facts:
    """What the rules look at."""
    manifest: Manifest
    knobs: dict
    step_time_s: float
    phases_s: dict[str, float]
    op_shares: dict[str, float]
    peak_flops: dict[str, float]
    cores: int
    device_type: str
    peak_mem_bytes: list[int]
    mem_cap_bytes: int | None


def diagnose(facts: Facts) -> list[dict]:
    """Every rule's finding, largest share of the step first."""
    rules = (_attention, _optimizer, _communication, _threads, _dispatch, _matmuls,
             _micro_batch, _precision, _compile, _memory, _data)
    findings = [f for rule in rules for f in [rule(facts)] if f is not None]
    return [f.as_dict() for f in sorted(findings, key=lambda f: -f.share)]


def _has_patch(facts: Facts, patch_id: str) -> bool:
    return any(p.id == patch_id for p in facts.manifest.patches)


def _knobs(facts: Facts, *names: str) -> list[str]:
    return [n for n in names if n in facts.knobs]


def _ops_share(facts: Facts, names: set[str]) -> float:
    return sum(share for op, share in facts.op_shares.items() if op in names)


def _phase_share(facts: Facts, phase: str) -> float:
    return facts.phases_s.get(phase, 0.0) / facts.step_time_s


def _attention(facts: Facts) -> Finding | None:
    share = _ops_share(facts, ATTENTION_OPS)
    if share < 0.02 or not _has_patch(facts, "sdpa_attention"):
        return None
    return Finding("attention materialises the T x T scores (mask, softmax)",
                   f"{share:.0%} of the step in softmax/mask operators", ["sdpa_attention"], share)


def _optimizer(facts: Facts) -> Finding | None:
    share = _phase_share(facts, "optimizer")
    if share < 0.05:
        return None
    suggests = ["fused_adamw"] if _has_patch(facts, "fused_adamw") else []
    return Finding("optimizer step with the single-tensor AdamW",
                   f"optimizer {share:.0%} of the step", suggests, share) if suggests else None


def _communication(facts: Facts) -> Finding | None:
    share = _phase_share(facts, "comm")
    if share < 0.05:
        return None
    patches = [p.id for p in facts.manifest.patches if p.category == "communication"]
    suggests = patches + _knobs(facts, *COMM_KNOBS)
    return Finding("exposed communication: ranks wait for gradients or tokens",
                   f"exposed communication {share:.0%} of the step "
                   f"({facts.phases_s.get('comm', 0):.4f} s)", suggests, share) if suggests else None


def _threads(facts: Facts) -> Finding | None:
    if facts.device_type != "cpu" or "threads_per_rank" not in facts.knobs:
        return None
    nproc = int(facts.knobs.get("nproc", 1))
    world = nproc * facts.manifest.launch.nodes
    threads = int(facts.knobs["threads_per_rank"]) or (1 if nproc > 1 else facts.cores)
    if world * threads == facts.cores:
        return None
    word = "oversubscribed" if world * threads > facts.cores else "idle cores"
    share = 0.3 if world * threads > facts.cores else 0.1
    return Finding(f"threads: {word}",
                   f"{world} rank(s) x {threads} intra-op thread(s) on {facts.cores} core(s)",
                   _knobs(facts, "threads_per_rank", "nproc"), share)


def _dispatch(facts: Facts) -> Finding | None:
    share = _ops_share(facts, DISPATCH_OPS)
    if share < 0.03 or not _has_patch(facts, "grouped_dispatch"):
        return None
    return Finding("MoE dispatch loops over experts with boolean masks",
                   f"{share:.0%} of the step in index/mask/nonzero operators",
                   ["grouped_dispatch"], share)


def _matmuls(facts: Facts) -> Finding | None:
    share = _ops_share(facts, MATMUL_OPS)
    if share < 0.2 or not _has_patch(facts, "fused_qkv"):
        return None
    return Finding("matmuls dominate; query, key and value are three separate GEMMs",
                   f"{share:.0%} of the step in matmul operators", ["fused_qkv"], share * 0.2)


def _micro_batch(facts: Facts) -> Finding | None:
    accum = int(facts.knobs.get("grad_accum", 1))
    if accum <= 1 or "micro_batch" not in facts.knobs:
        return None
    return Finding("small micro-batches: per-call overhead repeated every micro-step",
                   f"{accum} micro-steps of {facts.knobs['micro_batch']} sequence(s) per step",
                   _knobs(facts, "micro_batch", "accum_no_sync"), 0.05 * (accum - 1) / accum)


def _precision(facts: Facts) -> Finding | None:
    ratio = facts.peak_flops.get("bf16", 0) / max(facts.peak_flops.get("fp32", 1), 1)
    if facts.knobs.get("precision") != "fp32" or ratio < 1.2:
        return None
    return Finding("fp32 compute on hardware that is faster in bf16",
                   f"measured bf16 matmul peak {ratio:.1f}x the fp32 peak",
                   _knobs(facts, "precision", "fsdp_param_dtype"), 0.05)


def _compile(facts: Facts) -> Finding | None:
    if facts.knobs.get("compile") != "off":
        return None
    return Finding("eager execution: no graph compilation",
                   "compile=off; compilation costs start-up time the e2e objective pays",
                   ["compile"], 0.01)


def _memory(facts: Facts) -> Finding | None:
    cap = facts.mem_cap_bytes
    if not cap or max(facts.peak_mem_bytes, default=0) < 0.8 * cap:
        return None
    savers = [p.id for p in facts.manifest.patches if p.category == "memory"]
    used = max(facts.peak_mem_bytes) / cap
    return Finding("peak memory close to the capacity",
                   f"peak {used:.0%} of the {cap} bytes per rank",
                   savers + _knobs(facts, "activation_checkpointing", "micro_batch"), 0.02)


def _data(facts: Facts) -> Finding | None:
    share = _phase_share(facts, "data")
    if share < 0.1:
        return None
    return Finding("data loading on the critical path", f"data {share:.0%} of the step",
                   _knobs(facts, "micro_batch"), share)
