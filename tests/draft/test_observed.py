"""A script nobody wrote for InfraRSI, drafted by watching its training through PyTorch: a
torchrun loop whose schedule is epochs (no step argument at all) and whose batch and
accumulation arguments have names no rule knows, named by the user with ``--role``. The
harness ends each run after the scale's steps at the optimizer, and saves the parameters the
optimizer holds as the trial's evidence."""

import shutil

import pytest
import yaml
from conftest import FIXTURES, run_cli

from infrarsi.draft.command import CommandError, parse_command
from infrarsi.draft.draft import plan, read_script
from infrarsi.trial import prepare, run_trial
from infrarsi.verify import evidence
from infrarsi.workloads import load_manifest

COMMAND = ("torchrun", "--standalone", "--nproc-per-node", "2", "train.py", "--epochs", "1")
COMMAND += ("--per-replica-bs", "4", "--k-accum", "2")
ROLES = {"per-replica-bs": "micro_batch", "--k-accum": "grad_accum"}


def test_a_role_the_user_names_is_taken_as_given():
    folder = FIXTURES / "epochs-lm"
    draft = plan(read_script(parse_command(list(COMMAND)), folder, ROLES), cores=2)
    knobs = {k["name"]: k for k in draft.knobs}
    assert knobs["micro_batch"]["role"] == "micro_batch" and "grad_accum" in knobs
    assert "--per-replica-bs={micro_batch}" in draft.template
    assert draft.stop_after_steps and draft.params["steps"] > 0  # no step argument
    assert any(n.startswith("steps: no argument sets the number") for n in draft.notes)
    named = read_script(parse_command(list(COMMAND)), folder, {"rng": "seed", "epochs": "steps"})
    stepped = plan(named, cores=2)
    assert not stepped.stop_after_steps and "--epochs={steps}" in stepped.template
    assert "--rng={seed}" in stepped.template


@pytest.mark.parametrize(
    "named, said",
    [
        ({"num-updates": "steps"}, "the script declares no such argument (it declares: --ctx,"),
        ({"k-accum": "accumulation"}, "no such role; name one of steps, seed, grad_accum"),
        ({"k-accum": "ranks"}, "the ranks come from the launcher"),
        ({"per-replica-bs": "precision"}, "per_replica_bs is declared int, and precision needs"),
    ],
)
def test_a_role_that_cannot_be_is_an_answer(named, said):
    with pytest.raises(CommandError, match="--role") as refused:
        read_script(parse_command(list(COMMAND)), FIXTURES / "epochs-lm", named)
    assert said in str(refused.value)


@pytest.mark.slow
def test_a_script_with_no_step_argument_is_drafted_stopped_and_verified_by_its_weights(tmp_path):
    folder = tmp_path / "job"
    shutil.copytree(FIXTURES / "epochs-lm", folder)
    roles = [w for name, role in ROLES.items() for w in ("--role", f"{name}={role}")]
    drafted = run_cli(
        "manifest", "draft", "-o", "workload.yaml", "--yes", *roles, "--", *COMMAND, cwd=folder
    )
    assert drafted.returncode == 0, drafted.stderr
    raw = yaml.safe_load((folder / "workload.yaml").read_text())
    assert raw["launch"]["stop_after_steps"] is True
    assert raw["evaluation"] == {"framework": "optimizer"}
    assert {k["name"] for k in raw["knobs"]} >= {"nproc", "micro_batch", "grad_accum"}
    said = " ".join(drafted.stderr.split())
    assert "the parameters the optimizer (AdamW) holds" in said
    manifest = load_manifest(folder / "workload.yaml")
    one, two = (run_trial(prepare(manifest, "tiny"), tmp_path / name) for name in "ab")
    for record in (one, two):
        assert record.status.value == "ok", record.error
        assert record.metrics.steps == 6  # the epoch is far longer: stopped at the optimizer
        assert record.evaluation.error is None and record.evaluation.initial_weights
        saved = evidence.load_params(record.evaluation.final_weights)
        assert set(saved) == {"0.weight", "1.weight", "1.bias", "3.weight", "3.bias"}
    from infrarsi.init import make_contract, read_instruction

    contract = make_contract(manifest, "tiny", "cut time", read_instruction("cut time", []))
    same = evidence.check(contract, one, two, bf16=False)  # weights checked, no held-out set
    assert same.reasons == [] and same.not_checked == ["held-out loss: no evaluation command"]


def test_a_thread_count_argument_is_never_offered_zero(tmp_path):
    """A script may hand its thread count to ``torch.set_num_threads``, which refuses 0: 0 is
    offered only where the script ran with it."""
    (tmp_path / "train.py").write_text(
        "import argparse\np = argparse.ArgumentParser()\n"
        "p.add_argument('--threads', type=int, default=0)\n"
        "p.add_argument('--max-steps', type=int, default=5)\n"
        "p.add_argument('--batch-size', type=int, default=4)\n"
    )
    command = parse_command(["python", "train.py", "--threads", "2"])
    knobs = {k["name"]: k for k in plan(read_script(command, tmp_path), cores=2).knobs}
    assert knobs["threads"]["values"] == [1, 2]
    # run with 0 (the script's own guard leaves the library's default): its baseline kept
    as_run = parse_command(["python", "train.py"])
    knobs = {k["name"]: k for k in plan(read_script(as_run, tmp_path), cores=2).knobs}
    assert knobs["threads"]["values"] == [0, 1, 2]


def test_a_drafted_workload_is_named_by_its_content_and_command():
    from infrarsi.draft.assemble import _workload_name

    one = _workload_name("train.py", "print(1)", ["python", "train.py"])
    assert one.startswith("train-") and len(one) == len("train-") + 8
    assert one != _workload_name("train.py", "print(2)", ["python", "train.py"])
    assert one != _workload_name("train.py", "print(1)", ["python", "train.py", "--x", "1"])
    assert one == _workload_name("train.py", "print(1)", ["python", "train.py"])


def test_the_environment_a_frameworks_command_ran_in_is_kept(monkeypatch):
    """``ACCELERATE_USE_CPU=1`` makes accelerate's CPU world: a trial runs in the environment of
    whoever runs ``optimize``, so the draft keeps it in the launch."""
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    command = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "train.py"]
    draft = plan(read_script(parse_command(command), FIXTURES / "accelerate-lm"), cores=2)
    assert draft.env["ACCELERATE_USE_CPU"] == "1"
    assert "environment: ACCELERATE_USE_CPU=1 kept" in " ".join(draft.notes)


def test_a_mistyped_flag_is_shown_as_the_scripts_own_error():
    from infrarsi.draft.dry import _why

    printed = [
        "usage: train.py [-h] [--per-device-batch PER_DEVICE_BATCH]",
        "train.py: error: unrecognized arguments: --per-devce-batch 4",
        "Traceback (most recent call last):",
        '  File "/venv/bin/accelerate", line 8, in <module>',
        "subprocess.CalledProcessError: Command '[...]' returned non-zero exit status 2.",
    ]
    assert _why(printed) == "\n".join(printed[:2])


@pytest.mark.slow
@pytest.mark.parametrize(
    "fixture, command, knobs, smaller",
    [
        (
            "silent-lm",  # prints nothing per step; no DataLoader; names no rule knows
            ("python", "train.py", "--rows", "8", "--chunks", "2", "--intra", "1"),
            {"micro_batch": "--rows", "grad_accum": "--chunks", "intra": "--intra"},
            4,
        ),
        (
            "lightning-lm",  # a Lightning Trainer: no logger, no progress bar
            ("python", "fit.py", "--updates", "40", "--per-device-rows", "8", "--agg", "2"),
            {"micro_batch": "--per-device-rows", "grad_accum": "--agg", "prec": "--prec"},
            4,
        ),
        (
            "jsonl-lm",  # torchrun, epochs only, JSON lines with a loss under another name
            ("torchrun", "--standalone", "--nproc-per-node", "2", "loop.py", "--n-epochs", "1")
            + ("--shard-rows", "4", "--merge-every", "2"),
            {"micro_batch": "--shard-rows", "grad_accum": "--merge-every", "nproc": ""},
            2,
        ),
    ],
)
def test_a_script_that_prints_nothing_is_drafted_and_measured_from_its_training(
    tmp_path, fixture, command, knobs, smaller
):
    folder = tmp_path / "job"
    shutil.copytree(FIXTURES / fixture, folder)
    drafted = run_cli(
        "manifest", "draft", "-o", "workload.yaml", "--yes", "--", *command, cwd=folder
    )
    assert drafted.returncode == 0, drafted.stderr
    raw = yaml.safe_load((folder / "workload.yaml").read_text())
    assert raw["launch"]["metrics"] == {"observed": "optimizer"}
    validates = fixture == "lightning-lm"  # its own Trainer.validate judges the weights
    assert raw["evaluation"]["framework"] == ("lightning" if validates else "optimizer")
    template = " ".join(raw["launch"]["command"])
    for name, option in knobs.items():
        assert f"{option}={{{name}}}" in template if option else f"{{{name}}}" in template
    said = " ".join(drafted.stderr.split())
    assert "steps: read from the training itself" in said and "arguments: " in said
    assert "seq_len" in raw["invariants"]["tokens_per_step"]  # the rows' length, from the run
    manifest = load_manifest(folder / "workload.yaml")
    base = run_trial(prepare(manifest, "tiny"), tmp_path / "a")
    half = run_trial(prepare(manifest, "tiny", {"micro_batch": smaller}), tmp_path / "b")
    for record in (base, half):
        assert record.status.value == "ok", record.error
        assert record.metrics.steps == 6 and record.metrics.harness_step_time_s is not None
        assert record.evaluation.error is None and record.evaluation.final_weights
        assert (record.evaluation.eval_loss is not None) is validates
        if validates:  # the loaded parameters judged: the trained ones score apart from the first
            assert record.evaluation.eval_loss != record.evaluation.initial_eval_loss
        assert record.evaluation.layout_problems == []
    assert half.knobs["grad_accum"] == 4  # the global batch kept
    from infrarsi.init import make_contract, read_instruction

    contract = make_contract(manifest, "tiny", "cut time", read_instruction("cut time", []))
    same = evidence.check(contract, base, half, bf16=False)
    assert same.reasons == [], same.reasons
    assert ("held-out loss: no evaluation command" in same.not_checked) is not validates


CLICK_SCRIPT = r'''"""A tiny character model trained by a click command, the way many
research repos write their entry points: options with their own names, a hand-written loop
over a tensor, a tqdm-free progress line every few updates only. Not written for InfraRSI.

python main.py --total-updates 30 --rows-each 8 --pieces 2
"""

import click
import torch
import torch.nn.functional as F

ALPHABET = 96


@click.command()
@click.option("--total-updates", "updates", type=int, default=30, help="how long to train")
@click.option("--rows-each", type=int, default=8, help="rows in each piece")
@click.option("--pieces", type=int, default=2, help="pieces summed before an update")
@click.option("--span", type=int, default=24)
@click.option("--report-every", type=int, default=10)
def main(updates, rows_each, pieces, span, report_every):
    torch.manual_seed(3)
    net = torch.nn.Sequential(
        torch.nn.Embedding(ALPHABET, 40),
        torch.nn.Linear(40, 40),
        torch.nn.GELU(),
        torch.nn.Linear(40, ALPHABET),
    )
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    text = torch.randint(0, ALPHABET, (4096, span + 1), generator=torch.Generator().manual_seed(5))
    at = 0
    for update in range(updates):
        for _ in range(pieces):
            rows = text[at : at + rows_each]
            at = (at + rows_each) % (len(text) - rows_each)
            logits = net(rows[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, ALPHABET), rows[:, 1:].reshape(-1))
            (loss / pieces).backward()
        opt.step()
        opt.zero_grad()
        if (update + 1) % report_every == 0:
            click.echo(f"[{update + 1}/{updates}] ce={loss.item():.3f}")


if __name__ == "__main__":
    main()
'''


@pytest.mark.slow
def test_a_click_commands_options_are_read_and_their_roles_shown_by_the_run(tmp_path):
    """click's options (not argparse's) under names no rule knows: read from the source, their
    values recorded as the run parsed them, and the micro-batch and accumulation confirmed by
    the second dry run. (The script is written here, not kept under tests/fixtures: a folder
    added there changed the patch agent's smoke timing in test_draft_fixtures — not understood
    yet, see docs/testing.md.)"""
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "main.py").write_text(CLICK_SCRIPT)
    command = ("python", "main.py", "--total-updates", "30", "--rows-each", "8", "--pieces", "2")
    drafted = run_cli("manifest", "draft", "-o", "w.yaml", "--yes", "--", *command, cwd=folder)
    assert drafted.returncode == 0, drafted.stderr
    template = " ".join(yaml.safe_load((folder / "w.yaml").read_text())["launch"]["command"])
    assert "--rows-each={micro_batch}" in template and "--pieces={grad_accum}" in template
    said = " ".join(drafted.stderr.split())
    assert "rows_each: micro_batch, from the run" in said and "--total-updates" in said
