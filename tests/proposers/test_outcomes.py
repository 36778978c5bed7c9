"""What a proposer and the report are told per patch, read from the store's trials as they
are (``proposal.patch_outcomes`` over ``StoredTrial``: no copy into another shape)."""

import time

from infrarsi.proposal import patch_outcomes
from infrarsi.store import StoredTrial

BASE = {"micro_batch": 8}


def _trial(seq, patches, status="ok", step_s=None, peak=None, error=None) -> StoredTrial:
    return StoredTrial.model_validate(
        {
            "id": seq,
            "run_id": "r",
            "seq": seq,
            "config_json": {"knobs": BASE, "patches": patches},
            "status": status,
            "step_time_s": step_s,
            "peak_mem_bytes": peak,
            "started_unix_s": time.time(),
            "error": error,
        }
    )


def test_each_patch_is_told_its_speedup_memory_and_failures_over_the_baseline():
    trials = [
        _trial(0, [], step_s=0.2, peak=100.0),
        _trial(1, [], step_s=0.2, peak=100.0),
        _trial(2, ["fused_adamw"], step_s=0.1, peak=50.0),
        _trial(3, ["fused_adamw", "sdpa"], status="crash", error="boom"),
    ]
    out = {o.patch_id: o for o in patch_outcomes(trials, {"micro_batch": "8"})}
    assert out["fused_adamw"].trials == 2 and out["fused_adamw"].speedup == 2.0
    assert out["fused_adamw"].peak_mem_ratio == 0.5
    assert out["fused_adamw"].failures == ["crash: boom"]
    assert out["sdpa"].speedup is None and out["sdpa"].failures == ["crash: boom"]
