"""Which machine is this? The facts that decide how fast a job runs here, and their fingerprint.

Hosts change from one day to the next (one has AVX-512 and AMX, the next AVX2 only, where a bf16
matmul is ~100x slower than fp32), so every measurement carries the fingerprint of the host that
made it, and a figure from one host is never applied to another without saying so. The facts
are the CPU model and the ISA flags that change kernels, cores, memory, the GPU model and count,
the PyTorch build, and the intra-op threads a measurement used.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
from pathlib import Path

import psutil

# ISA features that decide which kernels PyTorch can use; the rest of /proc/cpuinfo's flags
# (security mitigations, virtualisation details) do not change how fast a job runs.
ISA_FLAGS = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
    "sve",
    "asimd",
    "bf16",
)
GIB = 2**30
CACHE_DIR = Path(os.environ.get("INFRARSI_CACHE", Path.home() / ".cache" / "infrarsi"))


def cpu_info(text: str | None = None) -> tuple[str, list[str]]:
    """CPU model name and the ISA flags of :data:`ISA_FLAGS` it has (``/proc/cpuinfo``)."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            return platform.processor() or "cpu", []
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() in ("flags", "Features"):
            flags |= set(value.split())
    model = model or platform.processor() or "cpu"
    return model, [f for f in ISA_FLAGS if f in flags]


def machine_facts(threads: int | None = None) -> dict:
    """What identifies this host for performance; ``threads`` = intra-op threads measured with."""
    import torch  # here, not at the top: a command that never asks (``bank list``) starts fast

    model, flags = cpu_info()
    cuda = torch.cuda.is_available()
    return {
        "cpu": model,
        "isa": flags,
        "cores": usable_cores(),
        "logical_cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / GIB),
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / GIB)
        if cuda
        else None,
        "device_type": "cuda" if cuda else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "threads": threads if threads is not None else torch.get_num_threads(),
    }


def usable_cores() -> int:
    """The physical cores this process may run on: all of them, or fewer when it is confined
    (``taskset``, a cpuset): a host confined to one core performs as a one-core host."""
    physical = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return physical
    return min(physical, allowed)


def usable_threads() -> int:
    """The logical CPUs this process may run on (fewer than ``os.cpu_count()`` when
    confined): the intra-op threads a measurement here uses by default."""
    try:
        return len(os.sched_getaffinity(0)) or os.cpu_count() or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def fingerprint(facts: dict) -> str:
    """A short hash of the facts: equal only on hosts that should perform alike."""
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


@functools.cache
def host_fingerprint() -> str:
    """This host's fingerprint as the measured tables and the trial records carry it (the
    facts with the threads this process may use)."""
    return fingerprint(machine_facts(usable_threads()))
