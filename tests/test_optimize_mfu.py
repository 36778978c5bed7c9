"""A workload whose FLOPs formula overstates its work: the Doctor measures an MFU above 100%,
measures the hardware again, and every stage still completes (it once ended in a KeyError)."""

import json
import subprocess
import sys

import pytest

from conftest import FIXTURES

pytestmark = pytest.mark.slow


def test_optimize_completes_when_the_measured_mfu_exceeds_100_percent(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "infrarsi", "optimize",
         str(FIXTURES / "overstated-flops" / "workload.yaml"), "cut time-to-train",
         "--scale", "tiny", "--budget", "2", "--top", "1", "--verify-rounds", "2",
         "--doctor-repeats", "2", "--yes", "--json", "--out", str(tmp_path / "rounds")],
        capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    doctor = json.loads((tmp_path / answer["run_dir"] / "doctor.json").read_text())
    assert doctor["mfu_pct"] > 100 and "equivalence" in doctor
    assert any("measured again" in w for w in doctor.get("warnings", []))
