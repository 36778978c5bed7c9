"""Jobs written on a framework, drafted with no hand edit, doctored and searched as the other
drafted scripts are, and verified by what they learned (slow: real dry runs and real trials;
``transformers`` and ``accelerate`` come with the test extra):

- ``trainer-llama``: a Hugging Face ``Trainer`` job (HfArgumentParser, a tiny Llama built
  from a config, a held-out split), run with ``python``: the harness saves its parameters
  around ``Trainer.train`` and the unpatched script's Trainer evaluates them on its held-out
  set, so a job that trains another model is refused by its weights and held-out loss, not
  passed on its printed loss;
- ``accelerate-lm``: an accelerate loop (an ``Accelerator`` given the accumulation and the
  precision, a tqdm bar, ``accelerator.print`` of ``step 3 | loss ... | 32.3 ms``,
  ``save_model``): under ``accelerate launch --multi_gpu`` with ``ACCELERATE_USE_CPU`` the
  ranks are a knob and the model given to ``Accelerator.prepare`` is saved at prepare and at
  exit; under ``--cpu --num_processes 2`` (one process on a CPU host) the ranks are kept.
"""

import json
import shutil

import pytest
import yaml
from conftest import FIXTURES, doctor_json, run_cli

from infrarsi.contract import load_contract
from infrarsi.trial import TrialRecord, prepare, run_trial
from infrarsi.verify import evidence
from infrarsi.workloads import load_manifest

pytestmark = pytest.mark.slow
THROUGHPUT = "maximise training throughput, keep the loss within 1%"
TRAINER = ("python", "train.py", "--output_dir", "out", "--max_steps", "6", "--use_cpu")
TRAINER += ("--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2")
TRAINER += ("--learning_rate", "2e-3", "--logging_steps", "1", "--save_strategy", "no")
TRAINER += ("--report_to", "none")
ACCELERATE = ("train.py", "--per-device-batch", "4", "--accum", "2", "--steps", "6")


def _drafted(fixture, command, tmp_path):
    folder = tmp_path / "job"
    shutil.copytree(FIXTURES / fixture, folder)
    drafted = run_cli(
        "manifest", "draft", "-o", "workload.yaml", "--yes", "--", *command, cwd=folder
    )
    assert drafted.returncode == 0, drafted.stderr
    return folder, " ".join((drafted.stdout + drafted.stderr).split())


def _doctored_and_searched(folder):
    """``init``, ``doctor`` and a one-trial ``run`` from the workload's own folder, as a user
    runs them (the tool's runs kept there); (the contract, the Doctor's baseline records). One
    search trial shows the drafted job searched; the drafted scripts' tests
    (``test_draft_fixtures.py``) show a knob moved between two."""
    init = run_cli(
        "init", str(folder / "workload.yaml"), THROUGHPUT, "-o", "c.yaml", "--yes", cwd=folder
    )
    assert init.returncode == 0, init.stderr
    report = doctor_json("c.yaml", "w", "--no-calibrate", cwd=folder)
    assert 0.0005 < report["step_time_s"] < 5 and report["tokens_per_s"] > 0
    run = run_cli("run", "c.yaml", "--budget", "1", "--no-bank", "--json", cwd=folder)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["trials"] == 1 and result["stop_reason"] == "budget spent"
    baselines = [TrialRecord.load(p) for p in sorted((folder / "w").glob("*/record.json"))]
    assert len(baselines) == 2 and all(b.status.value == "ok" for b in baselines)
    return load_contract(folder / "c.yaml"), baselines


def test_a_trainer_job_is_verified_by_its_weights_and_held_out_loss(tmp_path):
    folder, said = _drafted("trainer-llama", TRAINER, tmp_path)
    manifest = load_manifest(folder / "workload.yaml")
    assert manifest.evaluation is not None and manifest.evaluation.framework == "trainer"
    assert manifest.evaluation.command[:2] == ["python", "train.py"]
    assert "evaluates them on its eval_dataset" in said
    assert manifest.knob("optim").values == ["adamw_torch", "adamw_torch_fused"]
    contract, (baseline, again) = _doctored_and_searched(folder)
    for record in (baseline, again):
        ev = record.evaluation
        assert ev is not None and ev.error is None, ev
        assert ev.eval_loss is not None and ev.initial_eval_loss is not None
        assert ev.eval_loss < ev.initial_eval_loss  # it learned, and the held-out set shows it
        saved = evidence.load_params(ev.final_weights)
        assert "model.layers.0.self_attn.q_proj.weight" in saved  # the Llama's own names
    same = evidence.check(contract, baseline, again, bf16=False)
    assert same.reasons == [] and same.not_checked == [], same

    # another model: the same job at a learning rate 3x the baseline's, its loss lines alike
    # in kind; the harness's evidence, not the printed loss, refuses it
    raw = yaml.safe_load((folder / "workload.yaml").read_text())
    command = raw["launch"]["command"]
    raw["launch"]["command"] = [
        "--learning_rate=6e-3" if w.startswith("--learning_rate=") else w for w in command
    ]
    assert "--learning_rate=2e-3" in command and raw["launch"]["command"] != command
    (folder / "other.yaml").write_text(yaml.safe_dump(raw))
    spec = prepare(load_manifest(folder / "other.yaml"), "tiny", seed=baseline.seed)
    other = run_trial(spec, tmp_path / "other")
    assert other.status.value == "ok", other.error
    found = evidence.check(contract, baseline, other, bf16=False)
    assert any("final parameters differ" in r for r in found.reasons), found
    assert any("held-out loss" in r for r in found.reasons), found


def test_an_accelerate_launch_that_trains_one_process_keeps_its_ranks_as_given(tmp_path):
    """``accelerate launch --cpu --num_processes 2`` starts one process on a CPU host (accelerate
    forms a CPU world only through --multi_gpu with ACCELERATE_USE_CPU, or mpirun): the ranks
    are not searched, and the global batch is the one process's."""
    command = ("accelerate", "launch", "--cpu", "--num_processes", "2", *ACCELERATE)
    folder, said = _drafted("accelerate-lm", command, tmp_path)
    manifest = load_manifest(folder / "workload.yaml")
    assert manifest.launch.command[:3] == ["accelerate", "launch", "--num_processes=2"]
    assert "nproc" not in {k.name for k in manifest.knobs}
    raw = yaml.safe_load((folder / "workload.yaml").read_text())
    assert "micro_batch * grad_accum == 8" in [c["expr"] for c in raw["constraints"]]
    assert "framework saw 1 training together" in said
    assert raw["launch"]["metrics"] == {"observed": "optimizer"}
    assert '"step_time": {"pattern"' in said and '"unit": "ms"' in said  # the lines' patterns
    assert manifest.evaluation is not None and manifest.evaluation.framework == "accelerate"
    assert "no held-out loss is checked" in said


def test_an_accelerate_loop_over_two_processes_has_its_ranks_as_a_knob(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")  # accelerate's CPU world: --multi_gpu with it
    command = ("accelerate", "launch", "--multi_gpu", "--num_processes", "2", *ACCELERATE)
    folder, _ = _drafted("accelerate-lm", command, tmp_path)
    manifest = load_manifest(folder / "workload.yaml")
    assert manifest.launch.command[:3] == ["accelerate", "launch", "--num_processes={nproc}"]
    assert {k.name: k.role for k in manifest.knobs}["nproc"] == "ranks"
    raw = yaml.safe_load((folder / "workload.yaml").read_text())
    assert "micro_batch * grad_accum * nproc == 16" in [c["expr"] for c in raw["constraints"]]
    contract, (two_ranks, _) = _doctored_and_searched(folder)
    spec = prepare(manifest, "tiny", {"nproc": 1}, seed=two_ranks.seed)
    one_rank = run_trial(spec, tmp_path / "one")  # --multi_gpu off: accelerate refuses it
    assert one_rank.status.value == "ok", one_rank.error
    for record in (two_ranks, one_rank):
        saved = evidence.load_params(record.evaluation.final_weights)
        assert set(saved) == {f"{i}.weight" for i in (0, 1, 3, 4, 5)} | {
            f"{i}.bias" for i in (1, 3, 4, 5)
        }
    # two ranks or one over the same global batch: the same model, by its parameters
    found = evidence.check(contract, two_ranks, one_rank, bf16=False)
    assert found.reasons == [], found
    assert any("held-out loss" in n for n in found.not_checked), found
