"""A workload whose FLOPs formula overstates its work: the Doctor measures an MFU above 100%,
measures the hardware again, and every stage still completes (it once ended in a KeyError)."""

import json

import pytest
from conftest import FIXTURES, optimize_json

pytestmark = pytest.mark.slow


def test_optimize_completes_when_the_measured_mfu_exceeds_100_percent(tmp_path):
    answer = optimize_json(
        FIXTURES / "overstated-flops" / "workload.yaml",
        "cut time-to-train",
        tmp_path,
        "--budget",
        "2",
        "--top",
        "1",
        "--verify-rounds",
        "2",
        "--doctor-repeats",
        "2",
    )
    doctor = json.loads((tmp_path / answer["run_dir"] / "doctor.json").read_text())
    assert doctor["mfu_pct"] > 100 and "equivalence" in doctor
    assert any("measured again" in w for w in doctor.get("warnings", []))
