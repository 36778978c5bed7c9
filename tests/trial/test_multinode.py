"""Two simulated nodes: when one launcher dies midway, the trial ends ``crash`` promptly and
no process is left on either node."""

import threading
import time

import psutil
import pytest
from conftest import assert_no_leftovers

from infrarsi.sandbox.process import TRIAL_ID_ENV
from infrarsi.trial import TrialStatus, prepare, run_trial
from infrarsi.workloads import find

pytestmark = pytest.mark.slow


def _node_launcher(node_rank: int) -> psutil.Process | None:
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if (
                any(a == f"--node-rank={node_rank}" for a in cmdline)
                and TRIAL_ID_ENV in proc.environ()
            ):
                return proc
        except psutil.Error:
            continue
    return None


def _wait_for_training(workdir, timeout_s=60) -> None:
    """Until some rank has written a step: the launchers and ranks are all up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any("step" in p.read_text() for p in workdir.glob("*/metrics.rank*.jsonl")):
            return
        time.sleep(0.1)
    raise AssertionError("training never started")


@pytest.mark.parametrize("name", ["dense-2node", "moe-2node"])
def test_one_node_dying_ends_the_trial_as_crash(tmp_path, name):
    spec = prepare(find(name), "cpu", {}, timeout_s=90)  # long enough steps to die midway
    result = {}
    runner = threading.Thread(target=lambda: result.update(record=run_trial(spec, tmp_path)))
    runner.start()
    _wait_for_training(tmp_path)
    victim = _node_launcher(1)
    assert victim is not None, "node 1's launcher not found"
    killed_at = time.monotonic()
    victim.kill()
    runner.join(timeout=120)
    record = result["record"]
    assert record.status is TrialStatus.CRASH, (record.status, record.error)
    assert "node 1" in record.error
    assert time.monotonic() - killed_at < 30, "the surviving node was not ended promptly"
    assert_no_leftovers(record.trial_id)
