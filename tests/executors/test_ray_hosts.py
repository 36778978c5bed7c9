"""The Ray executor across two hosts with their own addresses, cores and files
(``bench/two_hosts.py``: network namespaces, a private tmpfs each, one core each), and the
faults a cluster has: a host lost mid-trial, the driver killed mid-run and resumed, a host that
joins late. Skipped where the machine cannot make the hosts (not root, no ``ip``), unless
``INFRARSI_REQUIRE_HOSTS=1`` makes that a failure."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

if os.environ.get("INFRARSI_REQUIRE_RAY") != "1":
    pytest.importorskip("ray", reason="Ray is not installed: scripts/setup.sh installs it")
import ray  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import two_hosts  # noqa: E402

from infrarsi.executors import TrialRequest  # noqa: E402
from infrarsi.executors.ray_executor import RayExecutor, release_idle  # noqa: E402
from infrarsi.store import Store  # noqa: E402
from infrarsi.trial import TrialStatus  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hosts():
    reason = two_hosts.why_not()
    if reason and os.environ.get("INFRARSI_REQUIRE_HOSTS") == "1":
        pytest.fail(f"INFRARSI_REQUIRE_HOSTS=1 but {reason}")
    if reason:
        pytest.skip(reason)
    with two_hosts.TwoHosts.start() as made:
        ray.init(address=made.address, namespace="infrarsi", log_to_driver=False)
        try:
            yield made
        finally:
            release_idle()
            ray.shutdown()


@pytest.fixture(autouse=True)
def two_live(hosts):
    """Each test starts with two live hosts (one lost by a test before is replaced)."""
    while len(hosts.alive()) < 2:
        hosts.add()
    yield
    release_idle()


def test_ray_trials_run_on_two_hosts_and_their_files_travel(hosts, tmp_path):
    executor = RayExecutor(tmp_path, hosts.address)
    request = TrialRequest(workload="dense-1node", scale="tiny", knobs={"nproc": 1})
    handles = [executor.submit(request) for _ in range(2)]
    records = [executor.wait(h) for h in handles]
    assert [r.status for r in records] == [TrialStatus.OK] * 2, [r.error for r in records]
    live = {h.address for h in hosts.alive()}
    assert {r.hosts[0] for r in records} == live  # one each: a trial asks for a whole host
    for record in records:  # the folder came back: the hosts' files are not visible here
        trial_dir = Path(record.trial_dir)
        assert trial_dir.parent == tmp_path / "trials" and (trial_dir / "record.json").is_file()
        assert Path(record.evaluation.final_weights).is_file()
    assert not any(Path(two_hosts.ROOT_MOUNT).iterdir())  # this side never saw the hosts' root
    assert records[0].fingerprint == records[1].fingerprint  # one core each: the same host kind


def test_ray_optimize_spreads_a_two_launcher_workload_over_both_hosts(hosts, tmp_path):
    """``optimize --budget 1`` of dense-2node: every stage's trials on the hosts, each search
    trial's launchers on both, meeting at the first host's address (one search trial shows it
    as three would: the search's trials go through the executor one by one)."""
    from conftest import optimize_json

    answer = optimize_json(
        Path("dense-2node"),
        "cut time, loss within 1%",
        tmp_path,
        "--budget", "1", "--doctor-repeats", "2", "--verify-rounds", "2", "--top", "1",
        "--no-bank", "--executor", "ray", "--ray-address", hosts.address,
    )  # fmt: skip
    run_dir = Path(answer["rounds"][0]["run_dir"])
    lines = [json.loads(line) for line in (run_dir / "audit.jsonl").read_text().splitlines()]
    assert {line["stage"] for line in lines} == {"doctor", "run", "apply"}
    assert sum(line["stage"] == "run" for line in lines) == 1
    assert "local" not in {line["node"] for line in lines}
    live = {h.address for h in hosts.alive()}
    ran = [line for line in lines if line["status"] in ("ok", "oom", "slow")]
    assert ran and all(sorted(line["hosts"]) == sorted(live) for line in ran), [
        (line["stage"], line["status"], line["hosts"]) for line in lines
    ]
    assert all(f"--master-addr={line['hosts'][0]}" in line["commands"][1] for line in ran)
    assert len({line["fingerprint"] for line in lines}) == 1  # baseline and candidates alike


def test_ray_moe_trial_spreads_its_launchers_over_both_hosts(hosts, tmp_path):
    """moe-2node's two launchers (expert parallelism: all-to-all between the hosts) meet at
    the first host's address; every rank's metrics and memory reach the trial."""
    record = RayExecutor(tmp_path, hosts.address).run(
        TrialRequest(workload="moe-2node", scale="tiny", knobs={}, evaluate=False)
    )
    assert record.status is TrialStatus.OK, record.error
    assert sorted(record.hosts) == sorted(h.address for h in hosts.alive())
    assert all(f"--master-addr={record.hosts[0]}" in cmd for cmd in record.commands)
    peaks = record.metrics.peak_mem_bytes
    assert len(peaks) == 2 and all(b > 0 for b in peaks), peaks


def _start_run(hosts, tmp_path: Path, budget: int, parallel: int) -> subprocess.Popen:
    """``infrarsi run`` of dense-1node at tiny (random search) on the hosts, as a process."""
    from conftest import run_cli

    made = run_cli(
        "init", "dense-1node", f"make it faster, {budget} trials", "--scale", "tiny", "--yes",
        "-o", str(tmp_path / "contract.yaml"), cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return subprocess.Popen(
        [sys.executable, "-m", "infrarsi", "run", "contract.yaml", "--budget", str(budget),
         "--searcher", "random", "--run-dir", str(tmp_path / "run"), "--json",
         *_ray_args(hosts, parallel)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _ray_args(hosts, parallel: int) -> list[str]:
    return ["--executor", "ray", "--ray-address", hosts.address, "--parallel", str(parallel)]


def _finish(tool: subprocess.Popen, timeout_s: float = 300) -> dict:
    """The run's JSON answer once it ends (killed, and the test failed, past ``timeout_s``):
    the whole of its stdout, though Ray prints a lost host's raylet log from a thread of its
    own (on stdout, even after the answer: the command sends it to stderr)."""
    try:
        out, err = tool.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        tool.kill()
        out, err = tool.communicate()
        pytest.fail(f"the run did not finish within {timeout_s:.0f} s: {err[-3000:]}")
    assert tool.returncode == 0, err[-3000:]
    return json.loads(out)


def _wait_for(condition, what: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout_s:.0f} s")
        time.sleep(0.2)


def test_ray_host_lost_mid_trial_ends_it_node_lost_and_the_run_goes_on(hosts, tmp_path):
    tool = _start_run(hosts, tmp_path, budget=3, parallel=2)
    victim = hosts.alive()[1]
    try:
        _wait_for(lambda: hosts.trial_pids(victim.index), "no trial ran on the second host")
        time.sleep(1)  # its ranks are running
        pids = hosts.trial_pids(victim.index)
        hosts.kill(victim.index)
    finally:
        result = _finish(tool)
    trials = _trials(tmp_path / "run")
    statuses = [t.status.value for t in trials]
    assert result["trials"] == len(trials) == 3 and statuses.count("crash") == 1, statuses
    (lost,) = [t for t in trials if t.status.value == "crash"]
    assert lost.record.error.startswith(f"node lost ({victim.address})"), lost.record.error
    assert lost.record.hosts == [victim.address]
    others = [t for t in trials if t is not lost]
    assert all(t.status.value == "ok" for t in others), [t.record.error for t in others]
    later = [t for t in others if t.record.started_unix_s > lost.record.started_unix_s]
    assert later and all(t.record.hosts[0] != victim.address for t in later)
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")], "a lost trial's process lives"


def test_ray_host_that_joins_late_is_used(hosts, tmp_path):
    """Three trials on two hosts: the third waits for a node (a trial takes a whole host),
    and a host that joins while the first two run takes it."""
    executor = RayExecutor(tmp_path, hosts.address)
    request = TrialRequest(workload="dense-1node", scale="steady", knobs={"nproc": 1})
    first = hosts.alive()
    handles = [executor.submit(request) for _ in range(3)]
    records: dict[str, object] = {}

    def poll() -> None:
        for h in handles:
            if h not in records and (record := executor.poll(h)) is not None:
                records[h] = record

    _wait_for(
        lambda: poll() or all(hosts.trial_pids(h.index) for h in first),
        "the two hosts were not both busy",
    )
    late = hosts.add()
    _wait_for(lambda: poll() or len(records) == 3, "the three trials did not end")
    assert [r.status for r in records.values()] == [TrialStatus.OK] * 3
    ran_on = [records[h].hosts[0] for h in handles]
    assert sorted(ran_on) == sorted([*(h.address for h in first), late.address]), ran_on
    hosts.kill(late.index)  # back to two hosts for the tests after


def test_ray_driver_lost_mid_run_then_resume_finishes_each_trial_once(hosts, tmp_path):
    """The driver killed while two trials are in flight: their processes on the hosts die
    with its Ray job; ``run --resume --executor ray`` keeps each lost attempt ("driver lost",
    not charged), proposes them again as new rows and finishes: every attempt with exactly one
    final record under its own trial id."""
    from conftest import run_cli

    run_dir = tmp_path / "run"
    tool = _start_run(hosts, tmp_path, budget=2, parallel=2)
    try:
        _wait_for(
            lambda: (
                _statuses(run_dir).count("running") == 2
                and all(hosts.trial_pids(h.index) for h in hosts.alive())
            ),
            "the run never had two trials running",
        )
    finally:
        tool.send_signal(signal.SIGKILL)
        tool.communicate(timeout=30)
    _wait_for(
        lambda: not any(hosts.trial_pids(h.index) for h in hosts.alive()),
        "the lost driver's trials still run on the hosts",
        timeout_s=60,
    )
    last = max(t.seq for t in _trials(run_dir))  # the run's rows when its driver died
    resumed = run_cli("run", "--resume", str(run_dir), "--json", *_ray_args(hosts, 2), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = json.loads(resumed.stdout.strip().splitlines()[-1])
    everything = _trials(run_dir)
    lost = [t for t in everything if t.status.value == "interrupted"]
    assert len(lost) == 2 and all(t.error.startswith("driver lost") for t in lost)
    after = [t for t in everything if t not in lost]
    assert result["trials"] == len(after) == 2  # the lost attempts are not charged
    assert sorted(t.seq for t in everything) == list(range(4))  # each proposal exactly once
    assert all(t.status.value == "ok" for t in after), [t.error for t in after]
    assert len({t.trial_id for t in everything}) == 4  # each attempt under an id of its own
    again = [t for t in after if last < t.seq <= last + len(lost)]  # proposed again first
    assert sorted(json.dumps(t.config_json, sort_keys=True) for t in again) == sorted(
        json.dumps(t.config_json, sort_keys=True) for t in lost
    )
    assert {h for t in after for h in t.record.hosts} <= {h.address for h in hosts.alive()}


def _trials(run_dir: Path):
    info = json.loads((run_dir / "run.json").read_text())
    return Store(info["store_url"]).trials(info["run_id"])


def _statuses(run_dir: Path) -> list[str]:
    if not (run_dir / "run.sqlite").exists() or not (run_dir / "run.json").exists():
        return []
    return [t.status.value for t in _trials(run_dir)]
