"""``infrarsi manifest draft`` on a user's argparse script (slow: a real dry run and a real
trial): the draft validates with no hand edit, its knobs carry their roles, the accumulation
follows the micro-batch at the baseline's global batch, and a trial of another micro-batch
runs ok with the metrics read from stdout in the right unit."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infrarsi.workloads import load_manifest

pytestmark = pytest.mark.slow
FOREIGN = Path(__file__).resolve().parents[1] / "fixtures" / "foreign"
CLI = [sys.executable, "-m", "infrarsi"]


def test_an_argparse_script_is_drafted_validated_and_runs_a_trial(tmp_path):
    folder = tmp_path / "job"
    shutil.copytree(FOREIGN, folder, ignore=shutil.ignore_patterns("workload.yaml"))
    command = ["python", "train_lm.py", "--batch-size", "4", "--accum", "2", "--iters", "6"]
    drafted = subprocess.run(
        [*CLI, "manifest", "draft", "-o", "workload.yaml", "--yes", "--", *command],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert drafted.returncode == 0, drafted.stderr
    assert "written and valid" in drafted.stderr
    manifest = load_manifest(folder / "workload.yaml")
    roles = {k.name: k.role for k in manifest.knobs}
    assert roles == {
        "micro_batch": "micro_batch",
        "grad_accum": "grad_accum",
        "threads": "threads",
        "bf16": "precision",
        "attn": "attention",
    }
    raw = yaml.safe_load((folder / "workload.yaml").read_text())
    assert raw["launch"]["metrics"] == {"observed": "optimizer"}  # the training's own steps
    said = " ".join(drafted.stderr.split())
    assert "the printed lines agree" in said and '"unit": "ms"' in said  # read, a cross-check
    assert raw["scales"]["tiny"]["params"]["tokens_per_step"] == 4 * 2 * 32
    assert manifest.files.locked == ["train_lm.py"]
    trial = subprocess.run(
        [*CLI, "trial", str(folder / "workload.yaml"), "--scale", "tiny"]
        + ["--set", "micro_batch=2", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    record = json.loads(trial.stdout)
    assert record["status"] == "ok", record.get("error")
    assert record["knobs"]["grad_accum"] == 4  # the global batch kept
    assert 0.001 < record["metrics"]["step_time_s"] < 10  # milliseconds read as such


def test_a_command_the_draft_cannot_read_is_refused_with_the_fix(tmp_path):
    result = subprocess.run(
        [*CLI, "manifest", "draft", "--yes", "--", "bash", "run.sh"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "python, torchrun or accelerate launch" in result.stderr
