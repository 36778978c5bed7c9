"""Real trials of dense-1node at tiny scale: real torchrun, real ranks, real memory caps.

(Each catalog patch's trial, its record naming the patch and keeping the loss within 1e-4 of
the baseline's, is proven once, with every other workload's, by
``tests/workloads/test_reference_workloads.py``: the two tests here that ran the same trials
again, sdpa's twice, were merged into it.)"""

import pytest
from conftest import assert_no_leftovers, cli_json

from infrarsi.trial import TrialStatus, prepare, run_trial

pytestmark = pytest.mark.slow


def rel_drift(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def baseline_record(tmp_path_factory):
    """The baseline trial through the CLI, as its JSON interface prints it."""
    workdir = tmp_path_factory.mktemp("trials")
    return cli_json("trial", "dense-1node", "--scale", "tiny", "--workdir", str(workdir))


def test_baseline_two_ranks_ok_with_every_metric(baseline_record):
    r = baseline_record
    assert r["status"] == "ok", r["error"]
    assert r["error"] is None and r["patches"] == [] and r["mem_cap_bytes"] is None
    assert r["knobs"]["nproc"] == 2 and r["knobs"]["grad_accum"] == 2
    m = r["metrics"]
    assert m["step_time_s"] > 0 and m["tokens_per_s"] > 0
    assert m["e2e_time_s"] > m["train_time_s"] > 0
    assert len(m["peak_mem_bytes"]) == 2 and all(b > 50 * 2**20 for b in m["peak_mem_bytes"])
    assert len(m["loss"]) == 8 and m["loss"][-1] < m["loss"][0]
    assert m["tokens_per_step"] == 8 * 64 and m["warmup_steps"] == 2
    assert {"forward", "backward", "optimizer", "data", "comm"} <= set(m["phases_s"])
    assert set(r["locked_files"]) == {"train.py", "data.py", "evaluate.py"}
    assert r["cost_s"] >= m["e2e_time_s"]
    assert_no_leftovers(r["trial_id"])


def test_two_splits_of_the_global_batch_train_the_same_model(dense, tmp_path):
    a = run_trial(prepare(dense, "tiny", {"nproc": 1, "micro_batch": 2, "grad_accum": 4}), tmp_path)
    b = run_trial(prepare(dense, "tiny", {"nproc": 1, "micro_batch": 4, "grad_accum": 2}), tmp_path)
    assert a.status is b.status is TrialStatus.OK
    assert rel_drift(a.metrics.loss, b.metrics.loss) <= 1e-5


def test_low_memory_cap_ends_oom_with_the_bound(tmp_path):
    r = cli_json("trial", "dense-1node", "--mem-cap", "150MiB", "--workdir", str(tmp_path))
    assert r["status"] == "oom", r["error"]
    assert r["mem_cap_bytes"] == 150 * 2**20 and r["metrics"] is None
    assert "memory" in r["error"].lower() or "MemoryError" in r["error"]
    assert_no_leftovers(r["trial_id"])
