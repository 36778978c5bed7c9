"""Validation of a proposed diff, cheapest check first: files, apply, compile, screen, and a
smoke trial at tiny scale judged by ``verify`` against a smoke baseline."""

import re

import pytest
from chat_server import broken_diff, catalog_diff, cheat_diff

from infrarsi.executors import LocalExecutor
from infrarsi.init import make_contract, read_instruction
from infrarsi.init.build import workload_files
from infrarsi.proposers.validate import Validator, smoke_contract
from infrarsi.trial import TrialRecord, patching
from infrarsi.workloads import find

INSTRUCTION = "Cut end-to-end time; keep loss within 0.5%"


def _contract(workload="dense-1node", scale="tiny"):
    manifest = find(workload)
    return make_contract(
        manifest, scale, INSTRUCTION, read_instruction(INSTRUCTION, workload_files(manifest))
    )


@pytest.fixture()
def validator(tmp_path):
    return Validator(_contract(), tmp_path, LocalExecutor(tmp_path))


@pytest.mark.parametrize(
    "diff, stage, reason",
    [
        (cheat_diff("edit_locked_data"), "files", "data.py: locked file"),
        (cheat_diff("locked_via_dotdot"), "files", "outside the workspace"),
        (cheat_diff("locked_via_symlink"), "files", "creates a symlink"),
        (
            "--- a/model.py\n+++ b/model.py\n@@ -1,2 +1,2 @@\n-no such line\n+x = 1\n",
            "apply",
            "git apply --check",
        ),
        (broken_diff(), "compile", r"model\.py:\d+: "),
    ],
)
def test_each_cheap_check_rejects_with_its_stage_and_reason(validator, diff, stage, reason):
    checked = validator.check(diff, smoke=False)
    assert (checked.ok, checked.stage) == (False, stage)
    assert re.search(reason, checked.reason), checked.reason


@pytest.mark.parametrize(
    "cheat, flag",
    [
        ("patch_perf_counter", "reaches the clock"),
        ("detach_attention", "changes what gets a gradient"),
        ("silent_bf16", "changes the precision"),
    ],
)
def test_the_screen_flags_and_never_decides(validator, cheat, flag):
    """What a diff's text says is a flag for the reader; what it does is the smoke trial's to
    judge (a renamed or reformatted cheat reads otherwise)."""
    checked = validator.check(cheat_diff(cheat), smoke=False)
    assert checked.ok and checked.stage == "screen"
    assert any(flag in f for f in checked.flags), checked.flags


def test_a_diff_with_wrong_hunk_counts_is_kept_as_git_writes_it(validator, tmp_path):
    diff = re.sub(
        r"^@@ -(\d+),\d+ \+(\d+),\d+ @@",
        r"@@ -\1,99 +\2,99 @@",
        catalog_diff("fused_adamw"),
        flags=re.MULTILINE,
    )
    checked = validator.check(diff, smoke=False)
    assert checked.ok, checked.reason
    stored = tmp_path / "canonical.diff"
    stored.write_text(checked.diff)
    workspace = tmp_path / "copy"
    import shutil

    shutil.copytree(find("dense-1node").root, workspace)
    assert patching.applies(stored, workspace)  # plain git apply, as a trial does it
    assert len(checked.sha256) == 64


def test_the_smoke_contract_is_the_runs_at_tiny_with_that_scales_invariants():
    contract = _contract(scale="cpu")
    smoke = smoke_contract(contract)
    assert smoke.scale == "tiny" and smoke.contract_hash != contract.contract_hash
    assert smoke.invariants.tokens_per_step == _contract().invariants.tokens_per_step
    assert smoke.equivalence == contract.equivalence and smoke.locked == contract.locked
    assert smoke_contract(_contract()) == _contract()


@pytest.mark.slow
def test_the_smoke_trial_passes_an_honest_patch_and_refuses_another_model(validator):
    good = validator.check(catalog_diff("sdpa_attention"))
    assert good.ok and good.stage == "smoke" and good.smoke_speedup > 0, good.reason
    for cheat, reason in (
        # a different model, judged by the final parameters the harness saved
        ("drop_last_block", "final parameters differ"),
        # round four: work after the launcher exits
        ("finish_after_the_launcher", "were still alive 1 s after its launcher exited"),
        # round five: step records held back and released in one burst (any trial)
        ("hold_step_records", "held back and released together"),
        # what the screen flags, the smoke trial refuses for what it does
        ("patch_perf_counter", "a faked timer"),
        # Not here: fewer_steps and detach_attention (the same checks, in
        # tests/test_adversarial.py), and small numerical changes (tanh_gelu, silent_bf16):
        # at a challenge seed drawn at random their weight distance at tiny is no constant
        # (tanh_gelu's 6.4e-05 to 1.9e-03 of the learned update over 13 seeds, under the
        # strict 2e-04 at 2 of them), so whether the smoke trial refuses one is the seed's;
        # test_adversarial.py judges them at the contract's seed through verify
    ):
        checked = validator.check(cheat_diff(cheat))
        assert (checked.ok, checked.stage) == (False, "smoke"), cheat
        assert reason in checked.reason, checked.reason
    # every smoke trial ran at the run's challenge seed, the baseline's too: never the
    # contract's own, for which a patch could carry a stored result
    seeds = {
        TrialRecord.load(path).seed for path in (validator.folder / "smoke").glob("*/record.json")
    }
    assert seeds == {validator.seed}, seeds
    assert validator.seed not in validator.contract.invariants.seeds.values()


@pytest.mark.slow
def test_a_users_workload_outside_the_package_is_validated_the_same_way(tmp_path):
    """A workload found by path (its manifest lists model.py as editable): its file reaches the
    prompt, an honest patch passes the smoke trial, one that changes the learning rate does
    not."""
    from chat_server import ROOT

    from infrarsi.proposers.prompt import messages

    manifest = find(str(ROOT / "tests" / "fixtures" / "microbatch-lm" / "workload.yaml"))
    contract = make_contract(
        manifest, "tiny", INSTRUCTION, read_instruction(INSTRUCTION, workload_files(manifest))
    )
    assert contract.workload_path
    prompt = messages(contract, None, [], [])[1]["content"]
    assert (
        "## model.py" in prompt
        and "class BigramLM" in prompt
        and "train.py" not in prompt.split("# Editable files")[1]
    )
    validator = Validator(contract, tmp_path, LocalExecutor(tmp_path))
    honest = (
        "--- a/model.py\n+++ b/model.py\n@@ -16,3 +16,3 @@\n"
        "         logits = self.table(idx)\n"
        "-        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), "
        "targets.reshape(-1))\n"
        "+        return F.cross_entropy(logits.flatten(0, -2), targets.flatten())\n"
        " \n"
    )
    good = validator.check(honest)
    assert good.ok, good.reason
    cheat = validator.check(cheat_diff("microbatch_lm_larger_lr"))
    assert (cheat.ok, cheat.stage) == (False, "smoke"), cheat.reason
