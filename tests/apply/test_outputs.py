"""What Apply writes (fast: git and files, no trial): the winner patch applies to a fresh copy of
the workload, the launch script holds the exact command, a derived workload builds the winner
in, and --to-branch commits the evidence."""

import shutil
import subprocess

import pytest

from infrarsi.apply.branch import BranchError, to_branch
from infrarsi.apply.outputs import fresh_copy, launch_script, winner_patch, write_winner
from infrarsi.derive import derive_workload
from infrarsi.init import make_contract, read_instruction
from infrarsi.init.build import workload_files
from infrarsi.records import ApplyResult, CandidateResult
from infrarsi.workloads import find, knobs


def _git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.parametrize(
    "workload,patches",
    [
        ("dense-1node", ["sdpa_attention", "fused_qkv", "fused_adamw"]),
        ("moe-2node", ["grouped_dispatch", "merged_all_to_all"]),
    ],
)
def test_the_winner_patch_applies_to_a_fresh_copy_of_the_workload(tmp_path, workload, patches):
    manifest = find(workload)
    diff = winner_patch(manifest, "tiny", {}, patches)
    assert diff.startswith("diff --git a/")
    (tmp_path / "winner.patch").write_text(diff)
    copy = fresh_copy(manifest, tmp_path / "copy")
    check = _git("apply", "--check", str(tmp_path / "winner.patch"), cwd=copy)
    assert check.returncode == 0, check.stderr
    _git("apply", str(tmp_path / "winner.patch"), cwd=copy)
    locked = [p for p in manifest.files.locked]
    touched = [line.split(" b/")[-1] for line in diff.splitlines() if line.startswith("diff --git")]
    assert touched and not any(shutil.fnmatch.fnmatch(t, g) for t in touched for g in locked)
    assert winner_patch(manifest, "tiny", {}, []) == ""  # knobs only: no code change


def test_the_launch_script_holds_each_nodes_command_with_the_winners_knobs():
    manifest = find("dense-2node")
    base = knobs.baseline(manifest, "tiny")
    script = launch_script(
        manifest, "tiny", {**base, "micro_batch": 2}, ["fused_adamw"], "headline"
    )
    lines = [line for line in script.splitlines() if "torchrun" in line]
    assert len(lines) == 2 and all(line.endswith("&") for line in lines)
    assert "--node-rank=0" in lines[0] and "--node-rank=1" in lines[1]
    assert all("--micro-batch=2" in line for line in lines)
    assert script.rstrip().endswith("wait") and "git apply winner.patch" in script
    assert lines[0].startswith("torchrun") or " torchrun " in lines[0]


def test_a_derived_workload_has_the_winner_built_in(tmp_path):
    manifest = find("dense-1node")
    base = knobs.baseline(manifest, "tiny")
    winner = {"knobs": {**base, "nproc": 1, "micro_batch": 4}, "patches": ["sdpa_attention"]}
    derived = derive_workload(manifest, "tiny", winner, tmp_path / "r2")
    assert derived.name == "dense-1node-r2"
    assert "sdpa_attention" not in [p.id for p in derived.patches]
    assert "fused_adamw" in [p.id for p in derived.patches]
    new_base = knobs.baseline(derived, "tiny")
    assert new_base["nproc"] == 1 and new_base["micro_batch"] == 4
    assert "scaled_dot_product_attention" in (derived.root / "model.py").read_text()
    again = derive_workload(derived, "tiny", {"knobs": new_base, "patches": []}, tmp_path / "r3")
    assert again.name == "dense-1node-r3"


def _result(run_dir, promoted=True) -> ApplyResult:
    winner = CandidateResult(
        label="c1",
        knobs={},
        patches=["fused_adamw"],
        ratios=[1.2] * 5,
        speedup=1.2,
        ci_low=1.1,
        ci_high=1.3,
        verified=True,
        promoted=promoted,
    )
    return ApplyResult(
        run_dir=str(run_dir),
        run_id="run-x",
        contract_hash="ab" * 32,
        workload="dense-1node",
        scale="tiny",
        compared="e2e_time_s",
        rounds=5,
        confidence=0.95,
        method="m",
        baseline={"knobs": {}},
        candidates=[winner],
        measurements=[],
        promoted="c1" if promoted else None,
        decision="d",
    )


def test_to_branch_commits_the_winner_with_its_evidence(tmp_path):
    manifest = find("dense-1node")
    repo = tmp_path / "repo"
    copy = fresh_copy(manifest, repo / "job")
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "job"],
    ):
        assert _git(*args, cwd=repo).returncode == 0
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "winner.patch").write_text(winner_patch(manifest, "tiny", {}, ["fused_adamw"]))
    (run_dir / "launch.sh").write_text("#!/usr/bin/env bash\ncd x\ntorchrun train.py\n")
    commit = to_branch(_result(run_dir), copy, "faster")
    log = _git("log", "-1", "--format=%B", "faster", cwd=repo).stdout
    assert "1.200x" in log and "[1.100, 1.300]" in log and "torchrun train.py" in log
    shown = _git("show", "--stat", commit, cwd=repo).stdout
    assert "job/model.py" in shown or "job/train.py" in shown
    assert _git("rev-parse", "--abbrev-ref", "HEAD", cwd=repo).stdout.strip() != "faster"
    with pytest.raises(BranchError, match="already exists"):
        to_branch(_result(run_dir), copy, "faster")
    with pytest.raises(BranchError, match="nothing was promoted"):
        to_branch(_result(run_dir, promoted=False), copy, "other")
    with pytest.raises(BranchError, match="not in a git repository"):
        to_branch(_result(run_dir), fresh_copy(manifest, tmp_path / "loose"), "b")


def test_a_promoted_patch_is_written_as_one_diff_that_applies_to_a_fresh_copy(tmp_path):
    """What Apply writes for a promoted code change — a catalog patch and one the proposer put
    in the run folder, in one winner.patch — applies to the workload as its user has it; a
    later Apply that promotes nothing removes both files (an e2e optimize promotes a patch only
    when this machine measured one faster, so its run cannot be the proof)."""
    manifest = find("dense-1node")
    instruction = "cut time-to-train, loss within 1%"
    contract = make_contract(
        manifest, "tiny", instruction, read_instruction(instruction, workload_files(manifest))
    )
    run_dir = tmp_path / "run"
    (run_dir / "proposals").mkdir(parents=True)
    shutil.copyfile(manifest.patch_path("sdpa_attention"), run_dir / "proposals" / "p1.diff")
    result = _result(run_dir).model_copy(
        update={
            "candidates": [
                _result(run_dir)
                .candidates[0]
                .model_copy(
                    update={
                        "knobs": {"micro_batch": 1},
                        "patches": ["proposals/p1.diff", "fused_adamw"],
                    }
                )
            ]
        }
    )
    assert write_winner(result, manifest, contract, run_dir) == ("winner.patch", "launch.sh")
    copy = fresh_copy(manifest, tmp_path / "copy")
    check = _git("apply", "--check", str(run_dir / "winner.patch"), cwd=copy)
    assert check.returncode == 0, check.stderr
    assert _git("apply", str(run_dir / "winner.patch"), cwd=copy).returncode == 0
    assert "scaled_dot_product_attention" in (copy / "model.py").read_text()
    script = (run_dir / "launch.sh").read_text()
    assert "1.200x [1.100, 1.300]" in script and contract.contract_hash[:12] in script
    assert "--micro-batch=1 --grad-accum=4" in script  # the winner's knobs, resolved
    assert write_winner(_result(run_dir, promoted=False), manifest, contract, run_dir) == ()
    assert not (run_dir / "winner.patch").exists() and not (run_dir / "launch.sh").exists()
