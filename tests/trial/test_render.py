"""A trial's launch command and environment, rendered from the manifest's templates."""

from conftest import FIXTURES

from infrarsi.trial import prepare
from infrarsi.trial.launch import render
from infrarsi.workloads import load_manifest


def test_a_thread_count_of_zero_leaves_the_variable_unset(tmp_path):
    manifest = load_manifest(FIXTURES / "toy-stdout")
    launch = manifest.launch.model_copy(
        update={"env": {"OMP_NUM_THREADS": "{sleep_ms}", "TOY_MODE": "{mode}"}}
    )
    manifest = manifest.model_copy(update={"launch": launch})
    _, env = render(prepare(manifest, "tiny", {"sleep_ms": 0}), tmp_path)
    assert "OMP_NUM_THREADS" not in env and env["TOY_MODE"] == "train"  # the launcher's default
    _, env = render(prepare(manifest, "tiny", {"sleep_ms": 200}), tmp_path)
    assert env["OMP_NUM_THREADS"] == "200"


def test_an_accelerate_launch_is_a_launcher_whose_one_rank_is_known_by_its_parent(tmp_path):
    """``accelerate launch`` starts ranks (it is no rank itself: no memory cap on it); its
    simple launcher's one process comes without LOCAL_RANK, so the launcher is marked and the
    bootstrap counts its direct child as the rank."""
    from infrarsi.trial.launch import is_launcher, isolated_env

    command = ["/venv/bin/accelerate", "launch", "--num_processes=1", "train.py"]
    assert is_launcher(command) and is_launcher(["torchrun", "x.py"])
    assert not is_launcher(["/venv/bin/python", "train.py"])
    assert not is_launcher(["accelerate", "config"])
    env = isolated_env(tmp_path, command, {})
    assert env["INFRARSI_MARK_LAUNCHER"] == "1" and "INFRARSI_CAP_SELF" not in env
    env = isolated_env(tmp_path, ["/venv/bin/python", "train.py"], {})
    assert env["INFRARSI_CAP_SELF"] == "1" and "INFRARSI_MARK_LAUNCHER" not in env


def test_a_copy_of_a_workload_leaves_out_the_tools_state_and_version_control(tmp_path):
    """A workload drafted in the user's folder keeps the tool's runs there (``.infrarsi``):
    a trial's copy of the folder must not take them, nor copy itself into itself where the
    trials are kept in another folder inside the workload's."""
    from infrarsi.workloads.folder import copy_workload

    for where, dst in ((".infrarsi", "trials/t2"), ("runs", "t2")):
        src = tmp_path / where.strip(".")
        for path in ("train.py", "data/x.bin", f"{where}/t1/workspace/train.py", ".git/HEAD"):
            (src / path).parent.mkdir(parents=True, exist_ok=True)
            (src / path).write_text("x")
        copied = src / where / dst / "workspace"
        copy_workload(src, copied, "out")
        assert sorted(str(p.relative_to(copied)) for p in copied.rglob("*")) == [
            "data",
            "data/x.bin",
            "train.py",
        ]
