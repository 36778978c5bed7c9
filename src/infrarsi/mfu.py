"""Model FLOPs utilisation: the share of this host's measured matmul peak that a workload's
useful FLOPs (the manifest's per-token formula; MoE counts active parameters only) reach.

Shared by the stages that report it (Doctor for the baseline, Report for before and after).
"""

from __future__ import annotations

from infrarsi.workloads import expr, precision_of


def mfu(manifest, scale: str, knobs: dict, hardware: dict, tokens_per_s: float) -> dict:
    """``mfu_pct`` with the figures behind it; ``None`` values when the manifest states no
    FLOPs formula. ``hardware`` is the host measurement (``peak_flops`` per precision and the
    ``facts`` of the host)."""
    if manifest.flops is None:
        return {"mfu_pct": None, "flops_per_token": None, "flops_formula": None}
    params = {**manifest.scale(scale).params, **knobs}
    per_token = float(expr.evaluate(manifest.flops.per_token, params))
    precision = precision_of(manifest, knobs)
    facts = hardware["facts"]
    devices = facts["device_count"] if facts["device_type"] == "cuda" else 1
    peak = hardware["peak_flops"].get(precision, hardware["peak_flops"]["fp32"]) * devices
    return {
        "mfu_pct": 100 * per_token * tokens_per_s / peak,
        "flops_per_token": per_token,
        "flops_formula": manifest.flops.formula,
        "mfu_formula": f"flops_per_token * tokens_per_s / ({precision} peak x {devices})",
    }
