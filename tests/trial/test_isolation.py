"""A trial cannot see outside itself: not other trials, not the harness's code or cache, and
it cannot raise its own limits (a mount namespace per rank, no capabilities; root only)."""

import os
import re

import pytest

from infrarsi.trial import TrialStatus, prepare, run_trial

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0,
                                                    reason="isolation needs root")]


def test_a_snooping_trial_is_refused_everything_and_still_trains(toy, tmp_path):
    first = run_trial(prepare(toy, "tiny", {}), tmp_path)  # a sibling worth reading
    assert first.status is TrialStatus.OK, first.error
    snoop = run_trial(prepare(toy, "tiny", {"mode": "snoop"}), tmp_path)
    assert snoop.status is TrialStatus.OK, snoop.error
    assert snoop.isolation == "namespace"
    text = (tmp_path / snoop.trial_id / "stdout.log").read_text()
    # two ranks share one stdout, so their lines may interleave: count the attempts, not lines
    attempts = re.findall(r"snoop: ([^:]+): (allowed|refused)", text)
    assert len(attempts) == 4 * 2, text  # four attempts on each of two ranks
    assert all(outcome == "refused" for _, outcome in attempts), attempts


def test_a_kernel_that_refuses_namespaces_changes_nothing_and_says_so(tmp_path):
    import subprocess
    import sys
    from infrarsi.trial.runner import HOOKS_DIR
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
