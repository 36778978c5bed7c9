"""A trial cannot see outside itself: not other trials, not the harness's code or cache, and
it cannot raise its own limits (a mount namespace per rank, no capabilities), nor reach a
socket or port outside it (a network namespace per trial; root only)."""

import os
import re
import socket

import pytest

from infrarsi.trial import TrialStatus, prepare, run_trial

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="isolation needs root"),
]


@pytest.mark.parametrize("owned_by", ["root", "user"], indirect=True)
def test_a_snooping_trial_is_refused_everything_and_still_trains(
    toy, tmp_path, monkeypatch, owned_by
):
    """It reads no other trial, writes no harness code, raises no limit, reads no cache, and
    reaches no socket or port outside it (what another trial, or a process it left, serves:
    both listen here, in the harness's network). As root, and in a user namespace (what a
    harness that is not root does)."""
    first = run_trial(prepare(toy, "tiny", {}), tmp_path)  # a sibling worth reading
    assert first.status is TrialStatus.OK, first.error
    name = f"infrarsi-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX) as abstract, socket.socket() as port:
        abstract.bind("\0" + name)
        abstract.listen()
        port.bind(("127.0.0.1", 0))
        port.listen()
        monkeypatch.setenv("TOY_OUTSIDE_SOCKET", name)
        monkeypatch.setenv("TOY_OUTSIDE_PORT", str(port.getsockname()[1]))
        snoop = run_trial(prepare(toy, "tiny", {"mode": "snoop"}), tmp_path)
    assert snoop.status is TrialStatus.OK, snoop.error
    assert snoop.isolation.startswith("namespace")
    assert snoop.ownership == owned_by
    text = (tmp_path / snoop.trial_id / "stdout.log").read_text()
    # two ranks share one stdout, so their lines may interleave: count the attempts, not lines
    attempts = re.findall(r"snoop: ([^:]+): (allowed|refused)", text)
    assert len(attempts) == 6 * 2, text  # six attempts on each of two ranks
    assert all(outcome == "refused" for _, outcome in attempts), attempts


def test_a_kernel_that_refuses_namespaces_changes_nothing_and_says_so(tmp_path):
    import subprocess
    import sys

    from infrarsi.sandbox import HOOKS_DIR

    code = f"""
import ctypes, os, sys
sys.path.insert(0, {str(HOOKS_DIR)!r})
import infrarsi_isolate as iso
class Refusing:
    def unshare(self, flags):
        ctypes.set_errno(1)
        return -1
iso._libc = Refusing()
before = open("/proc/self/mountinfo").read()
try:
    iso.isolate({str(tmp_path)!r}, [])
except iso.NamespacesRefused as exc:
    assert open("/proc/self/mountinfo").read() == before
    print("refused:", exc)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "refused: [Errno 1] unshare: Operation not permitted" in done.stdout, done.stderr


def _remove_stash():
    """What a stash trial could leave on this machine without isolation (never, with it)."""
    import ctypes
    import glob

    for path in (
        glob.glob("/dev/infrarsi-stash-*")
        + glob.glob("/tmp/infrarsi-stash-*")
        + glob.glob("/var/tmp/infrarsi-stash-*")
        + glob.glob("/run/infrarsi-stash-*")
    ):
        os.remove(path)
    libc = ctypes.CDLL(None, use_errno=True)
    for rank in range(2):
        shmid = libc.shmget(0x1F5A5700 + rank, 0, 0)
        if shmid >= 0:
            libc.shmctl(shmid, 0, None)  # IPC_RMID


@pytest.mark.parametrize("owned_by", ["root", "user"], indirect=True)
def test_nothing_one_trial_leaves_is_seen_by_the_next(toy, tmp_path, owned_by):
    """State shared between trials: every writable path a trial has (its tmp, home, cache,
    /dev/shm) is private and empty; /dev, /run, /tmp are read-only; a System V segment dies
    with the trial's IPC namespace. A second trial finds nothing the first one wrote."""
    _remove_stash()
    try:
        runs = [run_trial(prepare(toy, "tiny", {"mode": "stash"}), tmp_path) for _ in range(2)]
        texts = [(tmp_path / r.trial_id / "stdout.log").read_text() for r in runs]
        assert all(r.status is TrialStatus.OK for r in runs), [r.error for r in runs]
        assert "stash: wrote" in texts[0], texts[0]  # its private places are writable
        assert "stash: found" not in texts[1], texts[1]
        for shared in ("/dev/infrarsi", "/run/infrarsi", "/var/tmp/infrarsi", "/tmp/infrarsi"):
            assert f"stash: wrote {shared}" not in texts[0], texts[0]
    finally:
        _remove_stash()
