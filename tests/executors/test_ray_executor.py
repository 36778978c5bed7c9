"""The Ray executor on a real local Ray cluster (``ray.cluster_utils.Cluster``: a head and two
nodes on this machine, each with its own CPUs and a custom resource naming it)."""

import json
import os
import time
from pathlib import Path

import psutil
import pytest

if os.environ.get("INFRARSI_REQUIRE_RAY") != "1":  # CI sets it: there Ray must be installed
    ray = pytest.importorskip("ray", reason="Ray is not installed: scripts/setup.sh installs it")
import ray  # noqa: E402

from infrarsi.executors import TrialRequest  # noqa: E402
from infrarsi.executors.ray_executor import RayExecutor  # noqa: E402
from infrarsi.host import host_fingerprint  # noqa: E402
from infrarsi.trial import TrialStatus  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = {name: c.add_node(num_cpus=2, resources={name: 1}) for name in ("node_a", "node_b")}
    c.wait_for_nodes()
    ray.init(address=c.address, namespace="infrarsi")
    yield c, nodes
    ray.shutdown()
    c.shutdown()


def _scratch_processes() -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any("infrarsi-ray-" in part for part in p.info["cmdline"] or []):
                out.append(p)
        except psutil.Error:
            pass
    return out


def test_a_trial_runs_on_the_node_it_is_pinned_to_and_comes_back_whole(cluster, tmp_path):
    c, nodes = cluster
    executor = RayExecutor(tmp_path, c.address, resources={"node_b": 1})
    record = executor.run(TrialRequest(workload="dense-1node", scale="tiny", knobs={}))
    assert record.status is TrialStatus.OK, record.error
    assert record.node == nodes["node_b"].node_id and record.fingerprint == host_fingerprint()
    trial_dir = Path(record.trial_dir)
    assert trial_dir.parent == tmp_path / "trials" and (trial_dir / "record.json").is_file()
    assert Path(record.evaluation.final_weights).is_file()  # verification's evidence came back


def test_infrarsi_trial_runs_on_the_cluster_and_says_where(cluster, tmp_path):
    from conftest import run_cli
    c, nodes = cluster
    result = run_cli("trial", "dense-1node", "--executor", "ray", "--ray-address", c.address,
                     "--patch", "fused_adamw", "--workdir", str(tmp_path / "trials"), "--json",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads(result.stdout)
    assert record["status"] == "ok" and record["node"] in {n.node_id for n in nodes.values()}
    assert record["patches"][0]["id"] == "fused_adamw"
    assert Path(record["trial_dir"]).parent == tmp_path / "trials"


def test_a_node_lost_mid_trial_ends_it_crash_and_leaves_no_process(cluster, tmp_path):
    c, nodes = cluster
    executor = RayExecutor(tmp_path, c.address, resources={"node_a": 1})
    handle = executor.submit(TrialRequest(workload="dense-1node", scale="tiny", knobs={}))
    deadline = time.monotonic() + 60
    while not _scratch_processes() and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(2)
    c.remove_node(nodes["node_a"], allow_graceful=False)
    record = None
    while record is None and time.monotonic() < deadline + 120:
        record = executor.poll(handle)
        time.sleep(0.5)
    assert record is not None and record.status is TrialStatus.CRASH
    assert record.error.startswith("node lost")
    time.sleep(3)
    assert _scratch_processes() == []
