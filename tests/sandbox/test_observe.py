"""The observer a rank's bootstrap installs (``sandbox/_hooks/infrarsi_observe.py``), driven by
real training scripts in their own processes, none of them written for InfraRSI: the steps,
the losses that reached ``backward`` and the accumulation come from PyTorch itself, the
parameters from the optimizer, whatever the script's arguments are called and whatever it
prints; asked to, it ends the run cleanly after N optimizer steps."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from infrarsi.sandbox import HOOKS_DIR

LOOP = """
import argparse, torch
p = argparse.ArgumentParser()
p.add_argument("--num-updates", type=int, default=5)
p.add_argument("--mb", type=int, default=4)
p.add_argument("--accum-k", type=int, default=3)
a = p.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
xs, ys = torch.randn(400, 8, generator=torch.Generator().manual_seed(1)), torch.randn(400, 1)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs, ys), batch_size=a.mb)
it = iter(data)
for step in range(a.num_updates):
    for _ in range(a.accum_k):
        x, y = next(it)
        loss = torch.nn.functional.mse_loss(model(x), y) / a.accum_k
        loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"update {step} done", flush=True)
torch.save(dict(model.named_parameters()), "mine.pt")
print("trained", flush=True)
"""


def _observed(tmp_path: Path, script: str, *args: str, **env: str):
    """Run ``script`` as a plain launch's one rank with the observer on; (its records, the
    completed process)."""
    (tmp_path / "train.py").write_text(script)
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("INFRARSI_")}
    run_env.update(
        PYTHONPATH=str(HOOKS_DIR),
        INFRARSI_CAP_SELF="1",
        INFRARSI_OBSERVE=str(tmp_path / "observed.rank{rank}.jsonl"),
        INFRARSI_OBSERVE_WEIGHTS=str(tmp_path / "weights"),
        **env,
    )
    done = subprocess.run(
        [sys.executable, "train.py", *args],
        cwd=tmp_path,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    path = tmp_path / "observed.rank0.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return records, done


def _kind(records, kind):
    return [r for r in records if r["kind"] == kind]


def test_the_steps_losses_and_accumulation_come_from_pytorch(tmp_path):
    records, done = _observed(tmp_path, LOOP, "--num-updates", "5", "--accum-k", "3")
    assert done.returncode == 0, done.stderr
    steps = _kind(records, "step")
    assert [s["step"] for s in steps] == [0, 1, 2, 3, 4]
    assert all(s["backwards"] == 3 and len(s["losses"]) == 3 for s in steps)
    assert all(s["loss"] == pytest.approx(sum(s["losses"])) for s in steps)
    assert all(s["world"] == 1 and s["step_time_s"] > 0 for s in steps)
    (start,) = _kind(records, "start")
    assert start["optimizer"] == "AdamW"
    # what reached PyTorch, for a draft to confirm roles by
    (parsed,) = _kind(records, "args")
    assert parsed["values"] == {"num_updates": 5, "mb": 4, "accum_k": 3}
    seen = {r["what"]: r["value"] for r in _kind(records, "seen")}
    assert seen == {"set_num_threads": 1, "dataloader.batch_size": 4, "forward.batch": 4}


def test_the_parameters_the_optimizer_holds_are_saved_named_by_their_module(tmp_path):
    records, done = _observed(tmp_path, LOOP, "--num-updates", "3")
    assert done.returncode == 0, done.stderr
    initial = torch.load(tmp_path / "weights" / "initial.pt", weights_only=True)
    final = torch.load(tmp_path / "weights" / "final.pt", weights_only=True)
    mine = torch.load(tmp_path / "mine.pt", weights_only=True)
    assert set(initial) == set(final) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    torch.manual_seed(0)
    fresh = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    assert all(torch.equal(initial[k], v) for k, v in fresh.state_dict().items())
    assert all(torch.equal(final[k], mine[k]) for k in final)  # after the last step
    assert not torch.equal(final["0.weight"], initial["0.weight"])
    assert _kind(records, "end") == [{"kind": "end", "steps": 3}]


def test_a_run_ends_cleanly_after_n_optimizer_steps_whatever_its_arguments(tmp_path):
    records, done = _observed(tmp_path, LOOP, "--num-updates", "50", INFRARSI_STOP_AFTER_STEPS="2")
    assert done.returncode == 0, done.stderr
    assert "infrarsi: stopped after optimizer step 2" in done.stderr
    assert "trained" not in done.stdout  # the script's own end never came
    assert "update 1 done" in done.stdout and "update 2 done" not in done.stdout  # N logged
    assert len(_kind(records, "step")) == 2
    final = torch.load(tmp_path / "weights" / "final.pt", weights_only=True)
    (tmp_path / "two").mkdir()
    _observed(tmp_path / "two", LOOP, "--num-updates", "2")  # the same script told 2 updates
    two = torch.load(tmp_path / "two" / "mine.pt", weights_only=True)
    assert all(torch.equal(final[k], v) for k, v in two.items())


def test_without_the_harness_asking_nothing_is_observed(tmp_path):
    (tmp_path / "train.py").write_text(LOOP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFRARSI_")}
    env.update(PYTHONPATH=str(HOOKS_DIR), INFRARSI_CAP_SELF="1")
    done = subprocess.run(
        [sys.executable, "train.py", "--num-updates", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert not list(tmp_path.glob("observed*")) and not (tmp_path / "weights").exists()


SCALED = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20)
for step in range(4):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    if step == 1:
        loss = loss * float("inf")  # the scaler finds infinite gradients and skips the step
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
"""


def test_the_steps_reach_the_harnesss_channel_timed_on_arrival(tmp_path):
    from infrarsi.trial.watch import MetricsChannel

    channel = MetricsChannel(tmp_path)
    channel.start()
    try:
        records, done = _observed(
            tmp_path, LOOP, "--num-updates", "4", "--accum-k", "2",
            INFRARSI_OBSERVE_REPORT="1", **channel.env(),
        )  # fmt: skip
    finally:
        channel.stop()
    assert done.returncode == 0, done.stderr
    (report,) = channel.reports()
    assert report.rank == 0 and report.world_size == 1 and report.device == "cpu"
    observed = _kind(records, "step")
    assert [s["loss"] for s in report.steps] == [s["loss"] for s in observed]
    assert [s["backwards"] for s in report.steps] == [2, 2, 2, 2]
    assert report.end is not None and report.end["steps"] == 4 and report.end["peak_mem_bytes"] > 0
    timing = channel.timing()  # the harness's clock: from the first forward to the last step
    assert timing is not None and timing.steps == 4 and timing.span_s > 0


def test_a_step_a_gradient_scaler_skips_is_counted_and_said(tmp_path):
    records, done = _observed(tmp_path, SCALED)
    assert done.returncode == 0, done.stderr
    steps = _kind(records, "step")
    assert [s["skipped"] for s in steps] == [False, True, False, False]
    assert [s["step"] for s in steps] == [0, 1, 2, 3]
