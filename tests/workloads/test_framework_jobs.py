"""Jobs written on a framework, drafted with no hand edit and verified by what they learned
(slow: real dry runs and real trials; needs the ``frameworks`` test extra):

- ``trainer-llama``: a Hugging Face ``Trainer`` job (HfArgumentParser, a tiny Llama built
  from a config, a held-out split), run with ``python``: the harness saves its parameters
  around ``Trainer.train`` and the unpatched script's Trainer evaluates them on its held-out
  set, so a job that trains another model is refused by its weights and held-out loss, not
  passed on its printed loss;
- ``accelerate-lm``: an accelerate loop run with ``accelerate launch --cpu --num_processes 2``:
  ranks a knob, the model given to ``Accelerator.prepare`` saved at prepare and at exit.
"""

import shutil

import pytest
import yaml
from conftest import FIXTURES, run_cli

from infrarsi.contract import load_contract
from infrarsi.trial import prepare, run_trial
from infrarsi.verify import evidence
from infrarsi.workloads import load_manifest

pytestmark = pytest.mark.slow


THROUGHPUT = "maximise training throughput, keep the loss within 1%"
TRAINER = ("python", "train.py", "--output_dir", "out", "--max_steps", "6", "--use_cpu")
TRAINER += ("--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2")
TRAINER += ("--learning_rate", "2e-3", "--logging_steps", "1", "--save_strategy", "no")
TRAINER += ("--report_to", "none")


def _drafted(fixture, command, tmp_path):
    folder = tmp_path / "job"
    shutil.copytree(FIXTURES / fixture, folder)
    drafted = run_cli(
        "manifest", "draft", "-o", "workload.yaml", "--yes", "--", *command, cwd=folder
    )
    assert drafted.returncode == 0, drafted.stderr
    return folder, drafted.stdout + drafted.stderr


def test_a_trainer_job_is_verified_by_its_weights_and_held_out_loss(tmp_path):
    folder, said = _drafted("trainer-llama", TRAINER, tmp_path)
    manifest = load_manifest(folder / "workload.yaml")
    assert manifest.evaluation is not None and manifest.evaluation.framework == "trainer"
    assert manifest.evaluation.command[:2] == ["python", "train.py"]
    assert "evaluates them on its eval_dataset" in " ".join(said.split())
    assert manifest.knob("optim").values == ["adamw_torch", "adamw_torch_fused"]
    init = run_cli(
        "init", str(folder / "workload.yaml"), THROUGHPUT, "-o", "c.yaml", "--yes", cwd=folder
    )
    assert init.returncode == 0, init.stderr
    contract = load_contract(folder / "c.yaml")

    def trial(manifest, name, **knobs):
        spec = prepare(manifest, "tiny", knobs, seed=5)
        return run_trial(spec, tmp_path / name)

    baseline, again = trial(manifest, "baseline"), trial(manifest, "again")
    for record in (baseline, again):
        assert record.status.value == "ok", record.error
        ev = record.evaluation
        assert ev is not None and ev.error is None, ev
        assert ev.eval_loss is not None and ev.initial_eval_loss is not None
        assert ev.eval_loss < ev.initial_eval_loss  # it learned, and the held-out set shows it
        saved = evidence.load_params(ev.final_weights)
        assert "model.layers.0.self_attn.q_proj.weight" in saved  # the Llama's own names
    same = evidence.check(contract, baseline, again, bf16=False)
    assert same.reasons == [] and not any("held-out" in n for n in same.not_checked), same

    # another model: the same job at a learning rate 3x the baseline's, its loss lines alike
    # in kind; the harness's evidence, not the printed loss, refuses it
    raw = yaml.safe_load((folder / "workload.yaml").read_text())
    raw["launch"]["command"] = [
        "--learning_rate=6e-3" if w == "--learning_rate=2e-3" else w
        for w in raw["launch"]["command"]
    ]
    assert "--learning_rate=6e-3" in raw["launch"]["command"], raw["launch"]["command"]
    (folder / "other.yaml").write_text(yaml.safe_dump(raw))
    other = trial(load_manifest(folder / "other.yaml"), "other")
    assert other.status.value == "ok", other.error
    found = evidence.check(contract, baseline, other, bf16=False)
    assert any("final parameters differ" in r for r in found.reasons), found
    assert any("held-out loss" in r for r in found.reasons), found


def test_an_accelerate_launch_that_trains_one_process_keeps_its_ranks_as_given(tmp_path):
    """``accelerate launch --cpu --num_processes 2`` starts one process on a CPU host (accelerate
    forms a CPU world only through --multi_gpu with ACCELERATE_USE_CPU, or mpirun): the ranks
    are not searched, and the global batch is the one process's."""
    command = ("accelerate", "launch", "--cpu", "--num_processes", "2", "train.py")
    command += ("--per-device-batch", "4", "--accum", "2", "--steps", "6")
    folder, said = _drafted("accelerate-lm", command, tmp_path)
    manifest = load_manifest(folder / "workload.yaml")
    assert manifest.launch.command[:3] == ["accelerate", "launch", "--num_processes=2"]
    assert "nproc" not in {k.name for k in manifest.knobs}
    raw = yaml.safe_load((folder / "workload.yaml").read_text())
    assert "micro_batch * grad_accum == 8" in [c["expr"] for c in raw["constraints"]]
    assert "framework saw 1 training together" in " ".join(said.split())
    assert raw["launch"]["metrics"]["step_time"]["unit"] == "ms"
    assert manifest.evaluation is not None and manifest.evaluation.framework == "accelerate"
    assert "no held-out loss is checked" in " ".join(said.split())


def test_an_accelerate_loop_over_two_processes_has_its_ranks_as_a_knob(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")  # accelerate's CPU world: --multi_gpu with it
    command = ("accelerate", "launch", "--multi_gpu", "--num_processes", "2", "train.py")
    command += ("--per-device-batch", "4", "--accum", "2", "--steps", "6")
    folder, _ = _drafted("accelerate-lm", command, tmp_path)
    manifest = load_manifest(folder / "workload.yaml")
    assert manifest.launch.command[:3] == ["accelerate", "launch", "--num_processes={nproc}"]
    assert {k.name: k.role for k in manifest.knobs}["nproc"] == "ranks"
    raw = yaml.safe_load((folder / "workload.yaml").read_text())
    assert "micro_batch * grad_accum * nproc == 16" in [c["expr"] for c in raw["constraints"]]

    records = [
        run_trial(prepare(manifest, "tiny", {"nproc": n}, seed=3), tmp_path / f"n{n}")
        for n in (2, 1)
    ]
    for record in records:
        assert record.status.value == "ok", record.error
        assert 0.0005 < record.metrics.step_time_s < 5
        saved = evidence.load_params(record.evaluation.final_weights)
        assert set(saved) == {f"{i}.weight" for i in (0, 1, 3, 4, 5)} | {
            f"{i}.bias" for i in (1, 3, 4, 5)
        }
    # two ranks or one over the same global batch: the same model, by its parameters
    contract = load_contract_for(folder)
    found = evidence.check(contract, records[0], records[1], bf16=False)
    assert found.reasons == [], found
    assert any("held-out loss" in n for n in found.not_checked), found


def load_contract_for(folder):
    init = run_cli(
        "init", str(folder / "workload.yaml"), THROUGHPUT, "-o", "c.yaml", "--yes", cwd=folder
    )
    assert init.returncode == 0, init.stderr
    return load_contract(folder / "c.yaml")
