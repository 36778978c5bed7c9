"""Host facts: the ISA flags and threads are part of the fingerprint, and the hardware cache
is one file per fingerprint, written whole."""

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from infrarsi.doctor import hardware
from infrarsi.host import cpu_info, fingerprint, machine_facts

AVX512 = (
    "model name\t: Intel(R) Xeon(R)\nflags\t\t: fpu sse avx avx2 fma avx512f avx512_bf16 "
    "amx_bf16 amx_tile ibrs md_clear\n"
)
AVX2 = "model name\t: AMD EPYC\nflags\t\t: fpu sse avx avx2 fma ibrs\n"


def test_isa_flags_are_read_and_only_those_that_change_kernels():
    assert cpu_info(AVX512) == (
        "Intel(R) Xeon(R)",
        ["avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"],
    )
    assert cpu_info(AVX2)[1] == ["avx", "avx2", "fma"]


def test_fingerprint_changes_with_isa_and_threads():
    facts = machine_facts(threads=2)
    assert facts["threads"] == 2 and {"cpu", "isa", "cores", "memory_gib", "gpu"} <= set(facts)
    assert fingerprint(facts) != fingerprint({**facts, "isa": ["avx", "avx2"]})
    assert fingerprint(facts) != fingerprint({**facts, "threads": 1})
    assert fingerprint(facts) == fingerprint(dict(facts))


def test_a_slow_dtype_is_measured_within_its_time_cap():
    import torch

    result = hardware.peak_flops(torch.float32, "cpu", sizes=(64, 128, 4096), time_cap_s=0.5)
    assert result["flops_per_s"] > 0 and result["size"] in (64, 128)


def test_cache_writes_are_atomic_and_per_fingerprint(tmp_path, monkeypatch):
    monkeypatch.setattr(hardware, "CACHE_DIR", tmp_path)
    path = hardware.cache_path("abc")
    texts = [json.dumps({"writer": i, "pad": "x" * 200_000}) for i in range(8)]
    threads = [threading.Thread(target=hardware.write_atomically, args=(path, t)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert json.loads(path.read_text())["writer"] in range(8)  # one whole file, never a mix
    assert [p.name for p in tmp_path.iterdir()] == ["hardware-abc.json"]


@pytest.mark.skipif(
    shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2,
    reason="needs taskset and two CPUs",
)
def test_a_process_confined_to_one_core_is_a_one_core_host():
    code = (
        "from infrarsi import host; f = host.machine_facts(host.usable_threads()); "
        "print(f['cores'], f['threads'], host.fingerprint(f))"
    )
    confined = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    free = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert confined[:2] == ["1", "1"]
    assert int(free[0]) >= 2 and confined[2] != free[2]
