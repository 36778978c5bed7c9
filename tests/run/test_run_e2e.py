"""A real ``infrarsi run`` at tiny scale: it finishes; killed midway and resumed, its store holds
every trial exactly once (the one that was running stays as the lost attempt, not charged, and
is proposed again in a row of its own)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli
from counted_stores import COUNTED_STORES

from infrarsi.store import Store

COUNTING = Path(__file__).parents[1] / "counted_stores.py"  # python -m infrarsi, stores counted

pytestmark = pytest.mark.slow
# killed while its third trial runs: two finished before; after the resume the lost one
# again, then a new proposal
BUDGET = 4


def test_a_run_killed_midway_resumes_and_keeps_each_trial_once(tmp_path):
    made = run_cli(
        "init",
        "dense-1node",
        "make it faster, 5 trials",
        "--scale",
        "tiny",
        "--yes",
        "-o",
        str(tmp_path / "contract.yaml"),
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    run_dir = tmp_path / "run"
    counted = {**os.environ, COUNTED_STORES: str(tmp_path / "run-stores.txt")}
    tool = subprocess.Popen(
        [
            sys.executable,
            str(COUNTING),
            "run",
            "contract.yaml",
            "--budget",
            str(BUDGET),
            "--run-dir",
            str(run_dir),
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=counted,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # kill it while its third trial runs
            if (run_dir / "run.sqlite").exists() and (run_dir / "run.json").exists():
                statuses = [t.status for t in _trials(run_dir)]
                if statuses.count("running") == 1 and len(statuses) >= 3:
                    break
            time.sleep(0.5)
        else:
            pytest.fail("the run never reached its third trial")
        tool.send_signal(signal.SIGKILL)
        tool.wait(timeout=30)
    finally:
        if tool.poll() is None:
            tool.kill()
    before = _trials(run_dir)
    assert [t.status for t in before].count("running") == 1
    # the audit was written as each trial ended: the killed run's finished trials are in it
    assert _audited(run_dir) == sorted(t.trial_id for t in before if t.status != "running")
    resumed = subprocess.run(
        [sys.executable, str(COUNTING), "run", "--resume", str(run_dir), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env={**os.environ, COUNTED_STORES: str(tmp_path / "resume-stores.txt")},
    )
    assert resumed.returncode == 0, resumed.stderr
    # by hand, each command is its run's composer: one store of the run for the search, its
    # audit and the bank's ingest alike
    store_url = json.loads((run_dir / "run.json").read_text())["store_url"]
    for opened in ("run-stores.txt", "resume-stores.txt"):
        assert (tmp_path / opened).read_text().splitlines().count(store_url) == 1, opened
    result = json.loads(resumed.stdout)  # the one answer, the whole of stdout
    everything = _trials(run_dir)
    (lost,) = [t for t in everything if t.status == "interrupted"]  # the attempt killed
    assert lost.error.startswith("driver lost") and lost.trial_id
    after = [t for t in everything if t is not lost]
    assert result["trials"] == len(after)  # the lost attempt is not charged
    # the budget, unless the models expected nothing worth a trial from what was left
    assert len(after) == BUDGET or "detectable" in result["stop_reason"], result
    assert sorted(t.seq for t in everything) == list(range(len(everything)))  # each once
    assert all(t.status in ("ok", "oom", "timeout", "crash", "invalid", "slow") for t in after)
    assert len({t.trial_id for t in everything}) == len(everything)
    assert any(t.seq > lost.seq and t.config_json == lost.config_json for t in after)
    finished_before = {t.id: t for t in before if t.status != "running"}
    for t in after:  # nothing that had finished was run again
        if t.id in finished_before:
            assert t.trial_id == finished_before[t.id].trial_id
    assert result["best"]["step_time_s"] > 0 and "knobs" in result["best"]
    assert result["oom_trials"] == sum(t.status == "oom" for t in after)
    assert any(
        t.predicted_ranked_time_per_step_s for t in after
    )  # predictions stored beside measurements
    assert _audited(run_dir) == sorted(t.trial_id for t in after)  # each finished trial, once


def _audited(run_dir):
    lines = [json.loads(line) for line in (run_dir / "audit.jsonl").read_text().splitlines()]
    return sorted(line["trial_id"] for line in lines)


def _trials(run_dir):
    info = json.loads((run_dir / "run.json").read_text())
    return Store(info["store_url"]).trials(info["run_id"])
