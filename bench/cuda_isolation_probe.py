"""Which step of a trial's isolation hides a CUDA GPU: cuInit (libcuda, no torch) in a fresh
child after each step alone and after the steps together. Run as root on a GPU machine:
    python bench/cuda_isolation_probe.py
"""

import ctypes
import os
import subprocess
import sys

sys.path.insert(
    0, os.path.join(os.path.dirname(__file__), "..", "src", "infrarsi", "trial", "_hooks")
)
import infrarsi_isolate as iso  # noqa: E402


def cu_init():
    return ctypes.CDLL("libcuda.so.1").cuInit(0)


def child(step):
    pid = os.fork()
    if pid == 0:
        try:
            step()
            code = cu_init()
        except Exception as exc:  # noqa: BLE001
            print("  error", exc, flush=True)
            code = 255
        os._exit(min(code, 255))
    return os.waitpid(pid, 0)[1] >> 8


def ns_only():
    iso._check(iso._libc.unshare(iso.CLONE_NEWNS | iso.CLONE_NEWIPC), "unshare")


def ns_ipc():
    iso._check(iso._libc.unshare(iso.CLONE_NEWIPC), "unshare ipc")


def readonly_dev():
    iso._check(iso._libc.unshare(iso.CLONE_NEWNS), "unshare")
    iso._mount(None, "/", None, iso.MS_REC | iso.MS_PRIVATE)
    iso._mount(None, "/dev", None, iso.MS_REMOUNT | iso.MS_BIND | iso.MS_RDONLY)


def private_shm():
    iso._check(iso._libc.unshare(iso.CLONE_NEWNS), "unshare")
    iso._mount(None, "/", None, iso.MS_REC | iso.MS_PRIVATE)
    iso._mount("tmpfs", "/dev/shm", "tmpfs", 0, "mode=1777")


def full():
    os.makedirs("/tmp/probe_own", exist_ok=True)
    iso.isolate("/tmp/probe_own", [])


def full_keep_caps():
    real = iso.drop_capabilities
    iso.drop_capabilities = lambda: None
    try:
        full()
    finally:
        iso.drop_capabilities = real


STEPS = {
    "nothing": lambda: None,
    "ipc namespace": ns_ipc,
    "mount+ipc namespace": ns_only,
    "read-only /dev": readonly_dev,
    "private /dev/shm": private_shm,
    "capabilities dropped": iso.drop_capabilities,
    "isolate, capabilities kept": full_keep_caps,
    "isolate (all)": full,
}
for name, step in STEPS.items():
    print(f"{name:30} cuInit -> {child(step)}", flush=True)
code = "import ctypes; print(ctypes.CDLL('libcuda.so.1').cuInit(0))"
for flags in (["--pid", "--fork"], ["--net"], ["--pid", "--fork", "--net"]):
    r = subprocess.run(
        ["unshare", *flags, sys.executable, "-c", code], capture_output=True, text=True
    )
    print(
        f"unshare {' '.join(flags):24} cuInit -> {r.stdout.strip()} {r.stderr.strip()[-200:]}",
        flush=True,
    )
