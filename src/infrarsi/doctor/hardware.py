"""What this machine can do, measured: matmul peak per precision, memory bandwidth, and the
collective bandwidth of the distributed backend. Cached per machine fingerprint.

The peak is the best of a few large matmuls, with every core (CPU) or on one device (GPU):
the honest denominator of model-FLOPs utilisation is what this hardware reaches, not a
datasheet number.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import psutil
import torch

CACHE_DIR = Path(os.environ.get("INFRARSI_CACHE", Path.home() / ".cache" / "infrarsi"))
CACHE_VERSION = 1
COMM_PROBE = Path(__file__).with_name("_comm_probe.py")


def machine_facts() -> dict:
    """Device, counts, capacity and software versions: what identifies this machine."""
    cuda = torch.cuda.is_available()
    return {"device": torch.cuda.get_device_name(0) if cuda else _cpu_name(),
            "device_type": "cuda" if cuda else "cpu",
            "device_count": torch.cuda.device_count() if cuda else 1,
            "cores": psutil.cpu_count(logical=False) or os.cpu_count(),
            "logical_cores": os.cpu_count(),
            "memory_bytes": (torch.cuda.get_device_properties(0).total_memory if cuda
                             else psutil.virtual_memory().total),
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version(), "platform": platform.platform()}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def fingerprint(facts: dict) -> str:
    """A short hash of the machine facts: a cached probe is reused only on the same machine."""
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def peak_flops(dtype: torch.dtype, device: str, size: int = 2048, repeats: int = 10) -> float:
    """Best FLOP/s of ``repeats`` square matmuls of ``size`` (after one warm-up)."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    best = float("inf")
    for i in range(repeats + 1):
        _sync(device)
        t0 = time.perf_counter()
        torch.mm(a, b)
        _sync(device)
        if i:
            best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best


def memory_bandwidth(device: str, megabytes: int = 256, repeats: int = 5) -> float:
    """Best bytes/s of copying a large buffer (read + write counted)."""
    src = torch.empty(megabytes * 2**20 // 4, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    best = float("inf")
    for i in range(repeats + 1):
        _sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        if i:
            best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / best


def comm_bandwidth(ranks: int = 2, timeout_s: float = 120) -> dict:
    """All-reduce and all-to-all bandwidth of the backend, measured by ``ranks`` real ranks."""
    torchrun = Path(sys.executable).with_name("torchrun")
    result = subprocess.run([str(torchrun), "--standalone", f"--nproc-per-node={ranks}",
                             str(COMM_PROBE)], capture_output=True, text=True, timeout=timeout_s)
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return {"error": (result.stderr or result.stdout)[-500:]}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def probe_hardware(refresh: bool = False) -> dict:
    """The measured hardware profile of this machine, from the cache when it is there."""
    facts = machine_facts()
    key = fingerprint(facts)
    path = CACHE_DIR / f"hardware-{key}.json"
    if path.exists() and not refresh:
        cached = json.loads(path.read_text())
        if cached.get("cache_version") == CACHE_VERSION:
            return cached
    device = "cuda" if facts["device_type"] == "cuda" else "cpu"
    profile = {"cache_version": CACHE_VERSION, "fingerprint": key, "facts": facts,
               "measured_unix_s": time.time(), "threads": torch.get_num_threads(),
               "peak_flops": {"fp32": peak_flops(torch.float32, device),
                              "bf16": peak_flops(torch.bfloat16, device)},
               "memory_bandwidth_bytes_per_s": memory_bandwidth(device),
               "comm": comm_bandwidth()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile, indent=2))
    return profile
