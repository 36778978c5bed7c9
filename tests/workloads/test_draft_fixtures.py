"""Scripts written the ways people write them, each drafted from the command its author runs,
then taken through ``init``, ``doctor`` and a two-trial ``run`` with no hand edit (slow: real
dry runs and real trials):

- ``torchrun-lm``: argparse with Hugging Face-style names, launched with ``torchrun``, the
  accumulation per rank, printing its loss and no time (timed by its lines' arrival);
- ``configurator-lm``: nanoGPT-style globals overridden by ``configurator.py``, launched with
  ``torchrun``, the accumulation the job's total divided by the ranks, a ``dtype`` string, and
  its tokens per iteration printed with a thousands separator.
"""

import json
import shutil
from dataclasses import dataclass

import pytest
import yaml
from conftest import FIXTURES, run_cli

from infrarsi.workloads import load_manifest

pytestmark = pytest.mark.slow
THROUGHPUT = "maximise training throughput, keep the loss within 1%"


@dataclass(frozen=True)
class Case:
    fixture: str
    command: tuple[str, ...]
    roles: dict  # knob name -> role
    global_batch: str  # the constraint that keeps the global batch
    timed_by_arrival: bool
    tokens_per_step: int | None  # what the script printed, when it prints it
    counts_flops: bool  # the script prints its parameter count (so MFU can be reported)


CASES = [
    Case(
        "torchrun-lm",
        ("torchrun", "--standalone", "--nproc-per-node", "2", "train.py")
        + ("--micro_batch_size", "4", "--gradient_accumulation_steps", "2", "--max_steps", "6"),
        {"nproc": "ranks", "micro_batch": "micro_batch", "grad_accum": "grad_accum"}
        | {"dtype": "precision", "omp_num_threads": "threads"},
        "micro_batch * grad_accum * nproc == 16",
        True,
        None,
        False,
    ),
    Case(
        "configurator-lm",
        ("torchrun", "--standalone", "--nproc-per-node=2", "train.py", "--batch_size=4")
        + ("--gradient_accumulation_steps=4", "--max_iters=6"),
        {"nproc": "ranks", "micro_batch": "micro_batch", "grad_accum": "grad_accum"}
        | {"dtype": "precision", "compile": "compile", "omp_num_threads": "threads"},
        "micro_batch * grad_accum == 16",
        False,
        4 * 4 * 64,
        True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.fixture)
def test_a_script_is_drafted_then_doctored_and_searched_with_no_hand_edit(case, tmp_path):
    folder = tmp_path / "job"
    shutil.copytree(FIXTURES / case.fixture, folder)
    drafted = run_cli(
        "manifest", "draft", "-o", "workload.yaml", "--yes", "--", *case.command, cwd=folder
    )
    assert drafted.returncode == 0, drafted.stderr
    manifest = load_manifest(folder / "workload.yaml")
    assert {k.name: k.role for k in manifest.knobs} == case.roles
    raw = yaml.safe_load((folder / "workload.yaml").read_text())
    assert case.global_batch in [c["expr"] for c in raw["constraints"]]
    metrics = raw["launch"]["metrics"]
    assert ("step_time" not in metrics) is case.timed_by_arrival
    assert raw["scales"]["tiny"]["params"].get("tokens_per_step") == case.tokens_per_step

    init = run_cli(
        "init", str(folder / "workload.yaml"), THROUGHPUT, "-o", "c.yaml", "--yes", cwd=tmp_path
    )
    assert init.returncode == 0, init.stderr
    doctor = run_cli(
        "doctor",
        "c.yaml",
        "--repeats",
        "2",
        "--no-calibrate",
        "--workdir",
        "w",
        "--json",
        cwd=tmp_path,
    )
    assert doctor.returncode == 0, doctor.stderr
    report = json.loads(doctor.stdout)
    assert 0.0005 < report["step_time_s"] < 5  # seconds, whether printed in ms or timed
    assert report["tokens_per_s"] > 0
    assert ("flops" in raw) is case.counts_flops
    assert (report["mfu_pct"] is not None) is case.counts_flops  # else "not available"

    run = run_cli("run", "c.yaml", "--budget", "2", "--no-bank", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["trials"] == 2 and result["stop_reason"] == "budget spent"
    ranked = result["ranking"]  # the configs that ran to the end (one may be cut as slow)
    assert len(ranked) + result["slow_trials"] + result["oom_trials"] == 2, result
    assert all(0.0005 < r["step_time_s"] < 5 for r in ranked), ranked
    trials = store_trials(tmp_path, result["run_id"])
    assert len(trials) == 2 and trials[0].config_json != trials[1].config_json  # a knob moved


def store_trials(where, run_id):
    """The run's trials, in order, from its store."""
    from infrarsi.store import Store

    (path,) = where.glob(".infrarsi/runs/*/run.sqlite")
    return Store(f"sqlite:///{path}").trials(run_id)
