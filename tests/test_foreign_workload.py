"""A workload that is not one of ours, end to end: a plain `python` script with stdout metrics
in milliseconds, its own knob names and a store_true switch goes through init, doctor,
trial --contract and verify, from a directory that is not the workload's."""

import pytest
from conftest import FIXTURES, doctor_json, run_cli

from infrarsi.contract import load_contract
from infrarsi.trial import TrialRecord
from infrarsi.verify import verify

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def contract(tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    result = run_cli(
        "init",
        str(FIXTURES / "foreign" / "workload.yaml"),
        "cut time-to-train, loss within 1%, at most 1 GiB per rank, 10 trials",
        "-o",
        "c.yaml",
        "--yes",
        cwd=elsewhere,
    )
    assert result.returncode == 0, result.stderr
    return elsewhere / "c.yaml"


def test_init_keeps_the_workload_path_and_hash(contract):
    frozen = load_contract(contract)
    assert frozen.workload == "foreign-lm" and frozen.mem_cap_bytes == 2**30
    assert frozen.workload_path == str((FIXTURES / "foreign" / "workload.yaml").resolve())
    assert len(frozen.manifest_sha256) == 64 and frozen.budget.trials == 10


def test_doctor_reports_what_stdout_cannot_measure_and_speaks_the_workloads_names(
    contract, tmp_path
):
    report = doctor_json(str(contract), str(tmp_path), cwd=tmp_path)
    assert report["phases"] == {} and "stdout metrics" in report["not_measured"]["phases"]
    assert report["top_ops"] == [] and report["peak_mem_source"] == "memcg"
    assert all(b and b > 10 * 2**20 for b in report["peak_mem_bytes"])
    suggested = {s for d in report["diagnosis"] for s in d["suggests"]}
    assert "batch_size" in suggested  # the script's own name for the micro-batch
    assert not list(tmp_path.glob("doctor-progress-*"))  # no side journal: the report's trials
    assert [t["status"] for t in report["trials"]][:2] == ["ok", "ok"]  # the baseline runs
    # then the calibration on the script's own printed losses: another split, bf16
    assert any(t["label"].startswith("calibration") for t in report["trials"])
    assert "split" in report["equivalence"]["by_kind"], report["equivalence"]


def test_trial_under_the_contract_and_verify(contract, tmp_path):
    records = []
    for extra in ([], ["--set", "bf16=true", "--set", "attn=sdpa"]):
        result = run_cli(
            "trial",
            str(FIXTURES / "foreign"),
            "--contract",
            str(contract),
            "--workdir",
            str(tmp_path),
            "--json",
            *extra,
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr + result.stdout
        records.append(TrialRecord.model_validate_json(result.stdout))
    baseline, candidate = records
    assert "--bf16" in candidate.commands[0] and "--bf16" not in baseline.commands[0]
    assert candidate.mem_cap_bytes == 2**30 and candidate.contract_hash
    m = candidate.metrics
    assert m.outside_train_span_s > 0 and m.outside_span_steps == m.steps - 1
    assert all(0 < t < 5 for t in m.step_times_s)  # milliseconds were read as milliseconds
    frozen = load_contract(contract)
    assert verify(frozen, baseline, baseline).valid
    verdict = verify(frozen, baseline, candidate)
    assert verdict.valid, verdict.reasons
