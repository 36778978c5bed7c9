"""The Ray executor on a real local Ray cluster (``ray.cluster_utils.Cluster``: a head and two
nodes on this machine, each with its own CPUs and a custom resource naming it)."""

import json
import os
import sys
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


def _two_hosts_can_start() -> bool:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import two_hosts

    return two_hosts.why_not() is None


# Where two hosts with their own addresses can be made (CI requires them), test_ray_hosts.py
# shows the same on them, as a user's cluster has it: these run where it cannot
ON_TWO_HOSTS_INSTEAD = pytest.mark.skipif(
    _two_hosts_can_start(),
    reason="test_ray_hosts.py shows it on two hosts with their own addresses",
)


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(
        initialize_head=True,
        head_node_args={  # a lost node is noticed within ~3 s
            "num_cpus": 0,
            "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 3},
        },
    )
    nodes = {name: c.add_node(num_cpus=2, resources={name: 1}) for name in ("node_a", "node_b")}
    c.wait_for_nodes()
    ray.init(address=c.address, namespace="infrarsi")
    yield c, nodes
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def spare_nodes(cluster):
    """Two more nodes with a ``spare`` resource, removed after the test (the other tests count
    on the fixture's two)."""
    c, _ = cluster
    spare = [
        c.add_node(num_cpus=2, resources={"spare": 1, name: 1}) for name in ("node_c", "node_d")
    ]
    c.wait_for_nodes()
    yield spare
    from infrarsi.executors.ray_executor import release_idle

    release_idle()
    for node in spare:
        if node in c.worker_nodes:
            c.remove_node(node)


@pytest.fixture(autouse=True)
def released(cluster):
    """Each test leaves no placement group reserving the fixture's nodes."""
    yield
    from infrarsi.executors.ray_executor import release_idle

    release_idle()


def _scratch_processes() -> list[psutil.Process]:
    """Processes of a trial a node runs: their working folder is in the node's scratch."""
    out = []
    for p in psutil.process_iter():
        try:
            if "infrarsi-ray-" in p.cwd():
                out.append(p)
        except psutil.Error:
            pass
    return out


def test_infrarsi_trial_runs_on_the_cluster_and_says_where(cluster, tmp_path):
    from conftest import run_cli

    c, nodes = cluster
    result = run_cli(
        "trial",
        "dense-1node",
        "--executor",
        "ray",
        "--ray-address",
        c.address,
        "--patch",
        "fused_adamw",
        "--workdir",
        str(tmp_path / "trials"),
        "--json",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads(result.stdout)
    assert record["status"] == "ok" and record["node"] in {n.node_id for n in nodes.values()}
    assert record["patches"][0]["id"] == "fused_adamw"
    assert record["fingerprint"] == host_fingerprint()
    trial_dir = Path(record["trial_dir"])  # the trial's folder and its evidence came back
    assert trial_dir.parent == tmp_path / "trials" and (trial_dir / "record.json").is_file()
    assert Path(record["evaluation"]["final_weights"]).is_file()


def _contract():
    """dense-1node at tiny, as ``infrarsi init`` makes it."""
    from infrarsi.init import make_contract, read_instruction
    from infrarsi.init.build import workload_files
    from infrarsi.workloads import find

    manifest = find("dense-1node")
    text = "cut time, loss within 1%"
    return make_contract(manifest, "tiny", text, read_instruction(text, workload_files(manifest)))


def _scratch_of(process: psutil.Process) -> str | None:
    try:
        return next(
            (part for part in Path(process.cwd()).parts if part.startswith("infrarsi-ray-")), None
        )
    except psutil.Error:
        return None


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _node_running(process: psutil.Process, nodes: list):
    """The cluster node whose raylet ``process`` descends from (None: not one of theirs, or
    it has ended since it was listed — a trial's short-lived helpers do)."""
    raylets = {n.all_processes["raylet"][0].process.pid: n for n in nodes}
    try:
        parents = process.parents()
    except psutil.Error:
        return None
    return next((raylets[p.pid] for p in parents if p.pid in raylets), None)


@ON_TWO_HOSTS_INSTEAD  # test_ray_host_lost_mid_trial_ends_it_node_lost_and_the_run_goes_on
def test_a_node_lost_mid_run_ends_that_trial_crash_and_the_run_goes_on(
    cluster, spare_nodes, tmp_path
):
    import threading

    from infrarsi.options import Budget, SearchOptions
    from infrarsi.run.loop import start_run
    from infrarsi.run.setup import RunSetup
    from infrarsi.store import open_run_dir

    c, _ = cluster
    spare = spare_nodes
    run_dir = tmp_path / "run"
    setup = RunSetup.of(
        _contract(),
        run_dir,
        SearchOptions(searcher="random", budget=Budget(trials=3)),
        executor=RayExecutor(run_dir, c.address, resources={"spare": 1}),
    )
    thread = threading.Thread(target=start_run, args=(setup,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    seen: list[str] = []  # each trial's scratch folder, in the order they appear
    second = []
    while not second and time.monotonic() < deadline:
        processes = _scratch_processes()
        for scratch in map(_scratch_of, processes):
            if scratch and scratch not in seen:
                seen.append(scratch)
        second = [p for p in processes if len(seen) > 1 and _scratch_of(p) == seen[1]]
        time.sleep(0.1)
    assert second, f"the second trial did not start within 120 s (seen: {seen})"
    time.sleep(1)  # its ranks are running
    second = [p for p in _scratch_processes() if _scratch_of(p) == seen[1]] or second
    victim = next(filter(None, (_node_running(p, spare) for p in second)), None)
    if victim is None:  # let the run end before failing: a live run breaks the next tests
        thread.join(timeout=300)
        pytest.fail(f"no process of the second trial descends from a spare node: {second}")
    c.remove_node(victim, allow_graceful=False)
    thread.join(timeout=300)
    assert not thread.is_alive(), "the run did not finish after the node was lost"
    store, run = open_run_dir(run_dir)
    trials = store.trials(run.run_id)
    statuses = [t.status.value for t in trials]
    assert len(trials) == 3 and statuses.count("crash") == 1, statuses
    (lost,) = [t for t in trials if t.status.value == "crash"]
    assert lost.record.error.startswith("node lost"), lost.record.error
    assert statuses.count("ok") == 2  # the baseline before, another trial after, elsewhere
    assert lost.seq == 1 and trials[2].record.node != victim.node_id
    deadline = time.monotonic() + 30  # they die with the node's agent (parent-death) once it
    # notices its raylet is gone
    while any(map(_alive, second)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p.cmdline() for p in second if _alive(p)], "a process of the lost trial lives"


def test_a_run_keeps_two_trials_in_flight_one_per_node(cluster, tmp_path):
    from infrarsi.executors import LocalExecutor
    from infrarsi.options import Budget, SearchOptions
    from infrarsi.run.loop import start_run
    from infrarsi.run.setup import RunSetup
    from infrarsi.store import open_run_dir

    c, nodes = cluster
    contract = _contract()
    runs = {}
    for kind, budget, parallel in (("ray", 2, 2), ("local", 2, 1)):
        run_dir = tmp_path / kind
        executor = RayExecutor(run_dir, c.address) if kind == "ray" else LocalExecutor(run_dir)
        # the random searcher sets no slow bound: two trials at once on this machine's two
        # cores slow each other, and InfraRSI would cut one short
        options = SearchOptions(searcher="random", budget=Budget(trials=budget), parallel=parallel)
        start_run(RunSetup.of(contract, run_dir, options, executor=executor))
        store, run = open_run_dir(run_dir)
        runs[kind] = store.trials(run.run_id)
    ray_trials, local_trials = runs["ray"], runs["local"]
    assert [t.status.value for t in ray_trials] == ["ok"] * 2
    spans = sorted(
        (
            t.record.started_unix_s,
            t.record.started_unix_s + t.record.cost_s,
            t.record.node,
        )
        for t in ray_trials
    )
    overlapping = [(a, b) for a, b in zip(spans, spans[1:]) if b[0] < a[1]]
    assert overlapping and all(a[2] != b[2] for a, b in overlapping)  # at once, two nodes
    assert {s[2] for s in spans} == {n.node_id for n in nodes.values()}
    assert [t.status.value for t in local_trials] == ["ok"] * 2
    assert {t.record.node for t in local_trials} == {"local"}
    # a record from a node says as much as a local one
    assert ray_trials[0].record.model_fields_set == local_trials[0].record.model_fields_set
    assert [t.config_json for t in local_trials] == [t.config_json for t in ray_trials]


def test_trials_of_a_pinned_comparison_run_on_one_node_one_at_a_time(cluster, tmp_path):
    """What Apply does: its interleaved rounds go through ``pinned()``, so the baseline and
    the candidates are timed on one node, never two at once."""
    c, nodes = cluster
    executor = RayExecutor(tmp_path, c.address)
    request = TrialRequest(workload="dense-1node", scale="tiny", knobs={"nproc": 1}, evaluate=False)
    with executor.pinned() as one_node:
        handles = [one_node.submit(request), one_node.submit(request)]
        records = [one_node.wait(h) for h in handles]
    assert [r.status for r in records] == [TrialStatus.OK] * 2
    assert records[0].node == records[1].node in {n.node_id for n in nodes.values()}
    first, second = sorted(records, key=lambda r: r.started_unix_s)
    assert second.started_unix_s >= first.started_unix_s + first.cost_s - 0.5


@ON_TWO_HOSTS_INSTEAD  # test_ray_moe_trial_spreads_its_launchers_over_both_hosts, and the
# two-host optimize of dense-2node (every search trial's launchers on both hosts)
def test_a_two_node_trial_runs_its_launchers_on_two_nodes(cluster, tmp_path):
    """dense-2node's two launchers on two nodes (STRICT_SPREAD), meeting at the first one's
    node address; every rank's metrics and memory reach the trial, the weights come back."""
    c, nodes = cluster
    executor = RayExecutor(tmp_path, c.address)
    record = executor.run(TrialRequest(workload="dense-2node", scale="tiny", knobs={}))
    assert record.status is TrialStatus.OK, record.error
    assert sorted(record.launcher_nodes) == sorted(n.node_id for n in nodes.values())
    assert record.node == record.launcher_nodes[0]
    host = ray.util.get_node_ip_address()
    assert all(f"--master-addr={host}" in cmd for cmd in record.commands)
    peaks = record.metrics.peak_mem_bytes  # a rank per launcher at tiny: both were measured
    assert len(peaks) == 2 and all(b > 0 for b in peaks), peaks
    assert Path(record.evaluation.final_weights).is_file()
    assert _scratch_processes() == []


@ON_TWO_HOSTS_INSTEAD  # test_ray_optimize_spreads_a_two_launcher_workload_over_both_hosts
def test_optimize_runs_the_doctor_the_search_and_apply_on_the_cluster(cluster, tmp_path):
    from conftest import optimize_json

    c, nodes = cluster
    answer = optimize_json(
        Path("dense-1node"),
        "cut time, loss within 1%",
        tmp_path,
        "--budget",
        "4",
        "--doctor-repeats",
        "2",
        "--verify-rounds",
        "2",
        "--top",
        "1",
        "--no-bank",
        "--executor",
        "ray",
        "--ray-address",
        c.address,
    )
    run_dir = Path(answer["rounds"][0]["run_dir"])
    lines = [json.loads(line) for line in (run_dir / "audit.jsonl").read_text().splitlines()]
    assert {line["stage"] for line in lines} == {"doctor", "run", "apply"}
    assert sum(line["stage"] == "run" for line in lines) == 4
    where = {line["node"] for line in lines}
    assert where <= {n.node_id for n in nodes.values()}, where  # never "local"
    assert {line["fingerprint"] for line in lines} == {host_fingerprint()}
