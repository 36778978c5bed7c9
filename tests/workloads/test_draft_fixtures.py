"""Scripts written the ways people write them, each drafted from the command its author runs,
then taken through ``init``, ``doctor`` and a two-trial ``run`` with no hand edit (slow: real
dry runs and real trials):

- ``torchrun-lm``: argparse with Hugging Face-style names, launched with ``torchrun``, the
  accumulation per rank, printing its loss and no time (timed by its lines' arrival);
- ``logging-lm``: argparse, launched with ``python``, its steps logged with Python's
  ``logging`` (to standard error) with no time;
- ``configurator-lm``: nanoGPT-style globals overridden by ``configurator.py``, launched with
  ``torchrun``, the accumulation the job's total divided by the ranks, a ``dtype`` string, and
  its tokens per iteration printed with a thousands separator;
- ``tqdm-lm``: a tqdm bar over the steps (standard error, rewritten with carriage returns) and
  an accelerate-example line a step (``step 3 | loss 5.0123 | ppl 150.29 | 32.3 ms``), its
  batch and accumulation named ``--per-device-batch`` and ``--accum``.
"""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES, doctor_json, run_cli

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
        "logging-lm",
        ("python", "train.py", "--batch-size", "4", "--grad-accum", "2", "--num-steps", "6"),
        {"micro_batch": "micro_batch", "grad_accum": "grad_accum", "bf16": "precision"}
        | {"omp_num_threads": "threads"},
        "micro_batch * grad_accum == 8",
        True,
        None,
        False,
    ),
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
    Case(
        "tqdm-lm",
        ("python", "train.py", "--per-device-batch", "4", "--accum", "2", "--train-steps", "6"),
        {"micro_batch": "micro_batch", "grad_accum": "grad_accum"}
        | {"mixed_precision": "precision", "omp_num_threads": "threads"},
        "micro_batch * grad_accum == 8",
        False,
        None,
        False,
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
    # the steps from the training itself; the printed lines a cross-check, their patterns
    # (read from standard error, a printed time or none) said in the notes
    assert raw["launch"]["metrics"]["observed"] == "optimizer"
    said = " ".join(drafted.stderr.split())
    shown = said.split("to read the lines instead, set launch.metrics to ")[1]
    printed, _ = json.JSONDecoder().raw_decode(shown)
    assert ("step_time" not in printed) is case.timed_by_arrival
    assert printed.get("read_stderr", False) is (case.fixture == "logging-lm")
    assert raw["scales"]["tiny"]["params"].get("tokens_per_step") == case.tokens_per_step

    init = run_cli(
        "init", str(folder / "workload.yaml"), THROUGHPUT, "-o", "c.yaml", "--yes", cwd=tmp_path
    )
    assert init.returncode == 0, init.stderr
    report = doctor_json("c.yaml", "w", "--no-calibrate", cwd=tmp_path)
    assert 0.0005 < report["step_time_s"] < 5  # seconds, whether printed in ms or timed
    assert report["tokens_per_s"] > 0
    assert ("flops" in raw) is case.counts_flops
    assert (report["mfu_pct"] is not None) is case.counts_flops  # else "not available"
    # by hand too, the Doctor's trials went into the run's ledger as they ended
    doctor_ids = [t["trial_id"] for t in report["trials"]]
    assert doctor_trials(tmp_path, report["run_id"]) == doctor_ids

    run = run_cli("run", "c.yaml", "--budget", "2", "--no-bank", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["run_id"] == report["run_id"]  # the run the Doctor opened, continued
    assert doctor_trials(tmp_path, report["run_id"]) == doctor_ids  # each once
    (audit,) = tmp_path.glob(".infrarsi/runs/*/audit.jsonl")  # heard once each, too
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [line["trial_id"] for line in lines if line["stage"] == "doctor"] == doctor_ids
    assert result["trials"] == 2 and result["stop_reason"] == "budget spent"
    # the configs that ran to the end (one may be cut as slow); the baseline ranks too, by
    # the Doctor's runs the search was told (none of its own: `trials` 0)
    ranked = [r for r in result["ranking"] if r["trials"]]
    assert len(ranked) + result["slow_trials"] + result["oom_trials"] == 2, result
    assert all(0.0005 < r["step_time_s"] < 5 for r in ranked), ranked
    trials = store_trials(tmp_path, result["run_id"])
    assert len(trials) == 2 and trials[0].config_json != trials[1].config_json  # a knob moved


def store_trials(where, run_id, stage="run"):
    """The run's trials of ``stage``, in order, from its store (the one run folder there)."""
    from infrarsi.stages import Stage
    from infrarsi.store import Store

    (path,) = where.glob(".infrarsi/runs/*/run.sqlite")
    return Store(f"sqlite:///{path}").trials(run_id, Stage(stage))


def doctor_trials(where, run_id) -> list[str]:
    """The trial ids of the Doctor's trials the run's store holds, in order."""
    return [t.trial_id for t in store_trials(where, run_id, "doctor")]


def test_the_patch_agent_edits_a_drafted_scripts_model_file(tmp_path, monkeypatch):
    """``--proposer llm`` on a drafted manifest: the prompt carries the user's editable model
    file, and a patch to it is smoke-tested and searched on that workload (a scripted
    chat-completions server on loopback)."""
    import difflib

    from chat_server import ChatServer, fenced

    from infrarsi.proposal import read_lines

    folder = tmp_path / "job"
    shutil.copytree(FIXTURES / "configurator-lm", folder)
    command = ("python", "train.py", "--batch_size=4", "--gradient_accumulation_steps=4")
    drafted = run_cli(
        "manifest",
        "draft",
        "-o",
        "workload.yaml",
        "--yes",
        "--",
        *command,
        "--max_iters=6",
        cwd=folder,
    )
    assert drafted.returncode == 0, drafted.stderr
    manifest = load_manifest(folder / "workload.yaml")
    assert manifest.files.editable == ["model.py"] and "train.py" in manifest.files.locked
    source = (folder / "model.py").read_text()
    same_norm = source.replace(
        "        x = self.norm(x)\n",
        "        n = self.norm\n"
        "        x = F.layer_norm(x, x.shape[-1:], n.weight, n.bias, n.eps)\n",
    ).replace("import torch.nn as nn\n", "import torch.nn as nn\nimport torch.nn.functional as F\n")
    diff = "".join(
        difflib.unified_diff(
            source.splitlines(keepends=True),
            same_norm.splitlines(keepends=True),
            "a/model.py",
            "b/model.py",
        )
    )
    expectation = {"step_time_ratio": 0.97, "peak_mem_ratio": 1.0, "addresses": "the norm"}
    init = run_cli(
        "init", str(folder / "workload.yaml"), THROUGHPUT, "-o", "c.yaml", "--yes", cwd=tmp_path
    )  # the contract by the rules (no endpoint yet)
    assert init.returncode == 0, init.stderr
    chat = ChatServer([fenced(diff, expectation)])
    monkeypatch.setenv("INFRARSI_LLM_BASE_URL", chat.env["INFRARSI_LLM_BASE_URL"])
    monkeypatch.setenv("INFRARSI_LLM_MODEL", "scripted-model")
    try:
        run = run_cli(
            "run",
            "c.yaml",
            "--budget",
            "2",
            "--no-bank",
            "--proposer",
            "llm",
            "--llm-max-calls",
            "1",
            "--json",
            cwd=tmp_path,
        )
    finally:
        chat.close()
    assert run.returncode == 0, run.stderr
    assert "class LM(nn.Module)" in chat.prompt(0)  # the user's editable file, in the prompt
    result = json.loads(run.stdout)
    lines = read_lines(Path(result["run_dir"]))
    assert [(x.status, x.stage) for x in lines] == [("accepted", "smoke")], lines
    trials = store_trials(tmp_path, result["run_id"])
    assert any(lines[0].patch_id in t.config_json["patches"] for t in trials)
