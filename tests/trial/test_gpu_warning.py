"""A trial whose ranks ran on the CPU of a host with CUDA GPUs says so (on an H200 host CUDA
could not start inside the trial and the workload fell back to the CPU without a word)."""

from infrarsi.trial import launch as runner


def test_a_host_with_gpus_warns_when_the_ranks_ran_on_the_cpu(monkeypatch):
    monkeypatch.setattr(runner, "_host_gpus", lambda: 1)
    (warning,) = runner.host_cuda_unused()
    assert "1 CUDA GPU(s)" in warning and "ran on the CPU" in warning and "stderr.log" in warning


def test_a_host_without_gpus_says_nothing(monkeypatch):
    monkeypatch.setattr(runner, "_host_gpus", lambda: 0)
    assert runner.host_cuda_unused() == []
