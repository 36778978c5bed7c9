"""From measurements to a ranked diagnosis: each finding with its evidence (numbers) and the knobs
and catalog patches that address it.

Findings speak in roles (threads, attention, communication, memory saver ...), and suggest the
knobs and patches the manifest tags with those roles, whatever the workload calls them. A
finding whose role no knob or patch carries is still reported, with the role to tag.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from infrarsi.workloads import precision_of
from infrarsi.workloads.manifest import Manifest

ATTENTION_OPS = {
    "aten::softmax",
    "aten::_softmax",
    "aten::masked_fill",
    "aten::masked_fill_",
    "aten::_softmax_backward_data",
    "aten::eq",
}
DISPATCH_OPS = {
    "aten::nonzero",
    "aten::index",
    "aten::index_put_",
    "aten::_index_put_impl_",
    "aten::any",
    "aten::index_add_",
    "aten::masked_select",
}
MATMUL_OPS = {"aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::linear"}


@dataclass
class Finding:
    """One diagnosed waste: what, the numbers behind it, what to try; ``share`` ranks it."""

    finding: str
    evidence: str
    suggests: list[str]
    roles: list[str]
    share: float = field(default=0.0, repr=False)

    def as_dict(self) -> dict:
        out = {
            "finding": self.finding,
            "evidence": self.evidence,
            "suggests": self.suggests,
            "roles": self.roles,
            "share_of_step": round(self.share, 4),
        }
        if not self.suggests:
            out["note"] = (
                f"no knob or patch of this workload has role(s) {self.roles}: tag the "
                "ones that address it in the manifest"
            )
        return out


@dataclass
class Facts:
    """What the rules look at. ``op_shares`` and ``phases_s`` are empty when not measured."""

    manifest: Manifest
    knobs: dict
    step_time_s: float
    phases_s: dict[str, float]
    op_shares: dict[str, float]
    peak_flops: dict[str, float]
    cores: int
    device_type: str
    peak_mem_bytes: list[int | None]
    mem_cap_bytes: int | None


def diagnose(facts: Facts) -> list[dict]:
    """Every rule's finding, largest share of the step first."""
    rules = (
        _attention,
        _optimizer,
        _communication,
        _threads,
        _dispatch,
        _matmuls,
        _micro_batch,
        _precision,
        _compile,
        _memory,
        _data,
    )
    findings = [f for rule in rules for f in [rule(facts)] if f is not None]
    return [f.as_dict() for f in sorted(findings, key=lambda f: -f.share)]


def by_role(facts: Facts, *roles: str, patches: bool = True) -> list[str]:
    """Knobs (and catalog patches) of the workload that carry any of ``roles``."""
    out = []
    for role in roles:
        out += facts.manifest.knobs_with_role(role)
        out += facts.manifest.patches_with_role(role) if patches else []
    return list(dict.fromkeys(out))


def _finding(
    facts: Facts, text: str, evidence: str, roles: tuple[str, ...], share: float
) -> Finding:
    return Finding(text, evidence, by_role(facts, *roles), list(roles), share)


def _ops_share(facts: Facts, names: set[str]) -> float:
    return sum(share for op, share in facts.op_shares.items() if op in names)


def _phase_share(facts: Facts, phase: str) -> float:
    return facts.phases_s.get(phase, 0.0) / facts.step_time_s


@dataclass(frozen=True)
class ShareRule:
    """A finding when at least ``least`` of the step goes to some operators (``ops``, the
    profiler's shares) or to a phase (``phase``): its text, its evidence (``{share}`` and the
    phase's ``{seconds}`` filled in), the roles that address it, and its rank (the share times
    ``weight``)."""

    finding: str
    evidence: str
    roles: tuple[str, ...]
    least: float
    ops: frozenset[str] = frozenset()
    phase: str | None = None
    weight: float = 1.0

    def __call__(self, facts: Facts) -> Finding | None:
        if self.phase is not None:
            share = _phase_share(facts, self.phase)
        else:
            share = _ops_share(facts, set(self.ops))
        if share < self.least:
            return None
        seconds = facts.phases_s.get(self.phase or "", 0.0)
        evidence = self.evidence.format(share=share, seconds=seconds)
        return _finding(facts, self.finding, evidence, self.roles, share * self.weight)


_attention = ShareRule(
    "attention materialises the T x T scores (mask, softmax)",
    "{share:.0%} of the step in softmax/mask operators",
    ("attention",),
    0.02,
    ops=frozenset(ATTENTION_OPS),
)
_optimizer = ShareRule(
    "optimizer step is a large share of the step",
    "optimizer {share:.0%} of the step",
    ("optimizer",),
    0.05,
    phase="optimizer",
)
_exposed_comm = ShareRule(
    "exposed communication: ranks wait for gradients or tokens",
    "exposed communication {share:.0%} of the step ({seconds:.4f} s)",
    ("communication",),
    0.05,
    phase="comm",
)
_dispatch = ShareRule(
    "MoE dispatch loops over experts with boolean masks",
    "{share:.0%} of the step in index/mask/nonzero operators",
    ("dispatch",),
    0.03,
    ops=frozenset(DISPATCH_OPS),
)
_matmuls = ShareRule(
    "matmuls dominate; fewer, larger GEMMs use the hardware better",
    "{share:.0%} of the step in matmul operators",
    ("matmul",),
    0.2,
    ops=frozenset(MATMUL_OPS),
    weight=0.2,
)


def _communication(facts: Facts) -> Finding | None:
    found = _exposed_comm(facts)
    if found is None:
        return None
    category = [p.id for p in facts.manifest.patches if p.category == "communication"]
    found.suggests = list(dict.fromkeys(found.suggests + category))
    return found


def _threads(facts: Facts) -> Finding | None:
    threads_knobs = facts.manifest.knobs_with_role("threads")
    if facts.device_type != "cpu" or not threads_knobs:
        return None
    ranks_knobs = facts.manifest.knobs_with_role("ranks")
    per_node = int(facts.knobs.get(ranks_knobs[0], 1)) if ranks_knobs else 1
    world = per_node * facts.manifest.launch.nodes
    threads = int(facts.knobs.get(threads_knobs[0], 0)) or (1 if world > 1 else facts.cores)
    if world * threads == facts.cores:
        return None
    over = world * threads > facts.cores
    return _finding(
        facts,
        f"threads: {'oversubscribed' if over else 'idle cores'}",
        f"{world} rank(s) x {threads} intra-op thread(s) on {facts.cores} core(s)",
        ("threads", "ranks"),
        0.3 if over else 0.1,
    )


def _micro_batch(facts: Facts) -> Finding | None:
    accum_knobs = facts.manifest.knobs_with_role("grad_accum")
    accum = int(facts.knobs.get(accum_knobs[0], 1)) if accum_knobs else 1
    if accum <= 1:
        return None
    return _finding(
        facts,
        "small micro-batches: per-call overhead repeated every micro-step",
        f"{accum} micro-steps per optimizer step",
        ("micro_batch",),
        0.05 * (accum - 1) / accum,
    )


def _precision(facts: Facts) -> Finding | None:
    ratio = facts.peak_flops.get("bf16", 0) / max(facts.peak_flops.get("fp32", 1), 1)
    if precision_of(facts.manifest, facts.knobs) != "fp32" or ratio < 1.2:
        return None
    return _finding(
        facts,
        "fp32 compute on hardware that is faster in bf16",
        f"this host's measured bf16 matmul peak is {ratio:.1f}x its fp32 peak",
        ("precision",),
        0.05,
    )


def _compile(facts: Facts) -> Finding | None:
    knobs = facts.manifest.knobs_with_role("compile")
    if knobs and str(facts.knobs.get(knobs[0])).lower() not in ("off", "false", "0", "none"):
        return None
    return _finding(
        facts,
        "eager execution: no graph compilation",
        "compile is off; compilation costs start-up time the e2e objective pays",
        ("compile",),
        0.01,
    )


def _memory(facts: Facts) -> Finding | None:
    cap = facts.mem_cap_bytes
    known = [b for b in facts.peak_mem_bytes if b is not None]
    if not cap or max(known, default=0) < 0.8 * cap:
        return None
    found = _finding(
        facts,
        "peak memory close to the capacity",
        f"peak {max(known) / cap:.0%} of the {cap} bytes per rank",
        ("memory_saver", "activation_checkpointing", "micro_batch"),
        0.02,
    )
    category = [p.id for p in facts.manifest.patches if p.category == "memory"]
    found.suggests = list(dict.fromkeys(category + found.suggests))
    return found


def _data(facts: Facts) -> Finding | None:
    share = _phase_share(facts, "data")
    if share < 0.1:
        return None
    return _finding(
        facts,
        "data loading on the critical path",
        f"data {share:.0%} of the step",
        ("data", "micro_batch"),
        share,
    )
