"""A trial dies with the tool, even when the tool is killed with SIGKILL; anything an earlier,
killed tool left is swept before the next trial starts."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import FIXTURES

from infrarsi.sandbox.process import OWNER_ENV, TRIAL_ID_ENV, sweep_orphans, trial_processes

pytestmark = pytest.mark.slow


def _toy_processes():
    return [p for p in trial_processes() if p.environ().get(TRIAL_ID_ENV, "").startswith("toy-")]


def test_sigkill_of_the_tool_ends_launcher_and_ranks(tmp_path):
    tool = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "infrarsi",
            "trial",
            str(FIXTURES / "toy"),
            "--set",
            "mode=hang",
            "--workdir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while len(_toy_processes()) < 3 and time.monotonic() < deadline:  # launcher + two ranks
        time.sleep(0.2)
    assert len(_toy_processes()) >= 3, "the trial never started"
    tool.send_signal(signal.SIGKILL)
    tool.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _toy_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _toy_processes() == []


def test_orphans_of_a_dead_owner_are_swept_and_others_kept():
    dead_owner = {**os.environ, TRIAL_ID_ENV: "toy-orphan", OWNER_ENV: "999999999:0.00"}
    live_owner = {
        **os.environ,
        TRIAL_ID_ENV: "toy-other",
        OWNER_ENV: f"{os.getpid()}:{psutil.Process().create_time():.2f}",
    }
    orphan = subprocess.Popen(["sleep", "60"], env=dead_owner)
    other = subprocess.Popen(["sleep", "60"], env=live_owner)
    time.sleep(0.3)  # until both have exec'd with their own environment
    try:
        assert sweep_orphans() >= 1
        orphan.wait(timeout=5)  # ended (the sweep reaped it, so its code is not ours to read)
        assert other.poll() is None
    finally:
        orphan.kill()
        other.kill()
