"""Experiences made by hand for the bank's unit tests (the end-to-end test makes real ones)."""

import time

from infrarsi.store.bank import Experience

HOST = {
    "fingerprint": "hostA",
    "device_type": "cpu",
    "device": "Xeon",
    "device_count": 1,
    "cores": 2,
    "isa": ["avx2", "avx512f"],
    "peak_flops_fp32": 3e11,
    "bf16_over_fp32": 6.0,
    "memory_bandwidth_bytes_per_s": 2e10,
    "torch": "2.13",
}
WORKLOAD = {
    "name": "dense-1node",
    "scale": "bench",
    "family": "dense",
    "parameters": 2.5e6,
    "layers": 2,
    "width": 128,
    "seq_len": 256,
    "world_size": 2,
    "global_batch": 8,
}


def experience(
    key: str,
    knobs: dict,
    speedup: float | None,
    run: str = "run-1",
    status: str = "ok",
    patches=(),
    hardware: dict = HOST,
    workload: dict = WORKLOAD,
    stage: str = "run",
    censored: bool = False,
    peak: float | None = None,
    base_peak: float | None = None,
) -> Experience:
    return Experience(
        key=f"{run}/{stage}/{key}",
        created_unix_s=time.time(),
        run_id=run,
        contract_hash="c" * 64,
        stage=stage,
        workload=workload["name"],
        scale=workload["scale"],
        hardware_fp=hardware["fingerprint"],
        hardware_json=hardware,
        workload_fp="w" + workload["name"],
        workload_json=workload,
        knobs_json=knobs,
        patches_json=[{"id": p, "sha256": "s" + p} for p in patches],
        status=status,
        speedup=speedup,
        censored=censored,
        peak_mem_bytes=peak,
        baseline_peak_mem_bytes=base_peak,
    )
