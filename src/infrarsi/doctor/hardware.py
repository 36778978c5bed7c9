"""What this host can do, measured: matmul peak per precision, memory bandwidth, and the
collective bandwidth of the distributed backend. Cached per host fingerprint.

The peak is the best of several matmuls at several sizes, after a warm-up, with the threads the
measurement states: the honest denominator of model-FLOPs utilisation is what this hardware
reaches, not a datasheet number. Each dtype has a time cap: a dtype that is orders of magnitude
slower here (bf16 on a CPU without a bf16 path) is measured on a small matrix in seconds and
said to be so, instead of taking minutes. Cache files are written atomically, one per
fingerprint, so concurrent Doctors on different hosts (or the same one) never mix their facts.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from infrarsi.host import CACHE_DIR, fingerprint, machine_facts, usable_threads

if TYPE_CHECKING:  # imported where a measurement runs: reading the cache needs no torch
    import torch

CACHE_VERSION = 2
COMM_PROBE = Path(__file__).with_name("_comm_probe.py")
SIZES = (256, 512, 1024, 2048)
DTYPE_TIME_CAP_S = 6.0


def peak_flops(
    dtype: torch.dtype, device: str, sizes=SIZES, time_cap_s: float = DTYPE_TIME_CAP_S
) -> dict:
    """Best FLOP/s of square matmuls over ``sizes`` (ascending), within ``time_cap_s``.

    Each size gets one warm-up and then as many timed repeats as fit (at most 5); a size whose
    single matmul would not leave room for a few repeats ends the climb. Returns the best
    ``flops_per_s``, the size it was reached at, and whether the cap stopped the climb early.
    """
    import torch

    start, best, best_size, capped = time.perf_counter(), 0.0, 0, False
    for size in sizes:
        a = torch.randn(size, size, device=device).to(dtype)
        b = torch.randn(size, size, device=device).to(dtype)
        one = _time_mm(a, b, device)  # the warm-up, which also tells the cost of one
        left = time_cap_s - (time.perf_counter() - start)
        if one * 3 > left:
            capped = True
            if not best:  # even the smallest size is this slow: its one run is the figure
                best, best_size = 2 * size**3 / one, size
            break
        for _ in range(int(min(5, left / one / 2))):
            flops = 2 * size**3 / _time_mm(a, b, device)
            if flops > best:
                best, best_size = flops, size
    return {"flops_per_s": best, "size": best_size, "capped": capped}


def _time_mm(a: torch.Tensor, b: torch.Tensor, device: str) -> float:
    _sync(device)
    t0 = time.perf_counter()
    a.mm(b)
    _sync(device)
    return max(time.perf_counter() - t0, 1e-9)


def memory_bandwidth(device: str, megabytes: int = 256, repeats: int = 5) -> float:
    """Best bytes/s of copying a large buffer (read + write counted)."""
    import torch

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
    result = subprocess.run(
        [str(torchrun), "--standalone", f"--nproc-per-node={ranks}", str(COMM_PROBE)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return {"error": (result.stderr or result.stdout)[-500:]}


def _sync(device: str) -> None:
    if device.startswith("cuda"):  # (inside the timed span: nothing more on the CPU path)
        import torch

        torch.cuda.synchronize()


def cache_path(key: str) -> Path:
    """The cache file of the host with fingerprint ``key``."""
    return CACHE_DIR / f"hardware-{key}.json"


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new one, whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def measure(threads: int | None = None) -> dict:
    """Measure this host now, with ``threads`` intra-op threads (default: every core)."""
    import torch

    facts = machine_facts(threads or usable_threads())
    device = "cuda" if facts["device_type"] == "cuda" else "cpu"
    previous = torch.get_num_threads()
    torch.set_num_threads(facts["threads"])
    try:
        detail = {
            name: peak_flops(dtype, device)
            for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
        }
        bandwidth = memory_bandwidth(device)
    finally:
        torch.set_num_threads(previous)
    return {
        "cache_version": CACHE_VERSION,
        "fingerprint": fingerprint(facts),
        "facts": facts,
        "measured_unix_s": time.time(),
        "threads": facts["threads"],
        "peak_flops": {name: d["flops_per_s"] for name, d in detail.items()},
        "peak_flops_detail": detail,
        "memory_bandwidth_bytes_per_s": bandwidth,
        "comm": comm_bandwidth(),
    }


def probe_hardware(refresh: bool = False, threads: int | None = None) -> dict:
    """The measured profile of this host, from its own cache file when it is there."""
    key = fingerprint(machine_facts(threads or usable_threads()))
    path = cache_path(key)
    if path.exists() and not refresh:
        try:
            cached = json.loads(path.read_text())
        except json.JSONDecodeError:
            cached = {}
        if cached.get("cache_version") == CACHE_VERSION and cached.get("fingerprint") == key:
            return cached
    profile = measure(threads)
    try:
        write_atomically(path, json.dumps(profile, indent=2))
    except OSError as exc:  # a cache: unwritable (a read-only HOME), it is measured again
        logging.getLogger(__name__).warning(
            "the host's profile is not cached (%s: %s); set INFRARSI_CACHE to a writable "
            "folder to keep it",
            path,
            exc.strerror or exc,
        )
    return profile
