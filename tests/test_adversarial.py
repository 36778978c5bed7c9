"""Patches that try to win by cheating: each is refused before running or judged invalid by
``infrarsi.verify``, with its reason named. An honest patch passes the same checks."""

from pathlib import Path

import pytest

from infrarsi.init import make_contract, read_instruction
from infrarsi.init.build import workload_files
from infrarsi.trial import PatchRefused, TrialStatus, prepare, run_trial
from infrarsi.verify import verify

pytestmark = [pytest.mark.adversarial, pytest.mark.slow]
CHEATS = Path(__file__).parent / "fixtures" / "adversarial"
INSTRUCTION = "Cut end-to-end time; keep loss within 0.5% and memory under 2 GiB per rank"

RUNNABLE = {
    "shorten_sequence": "loss drift",
    "skip_optimizer_steps": "loss drift",
    "scale_loss_down": "loss drift",
    "change_data_seed": "loss drift",
    "cache_outputs": "loss drift",
    "fewer_steps": "ran 4 optimizer steps; the workload fixes 8",
    "smaller_global_batch": "tokens per optimizer step 256; the workload fixes 512",
    "forge_step_times": "a faked timer or forged metrics",
    "patch_perf_counter": "a faked timer or forged metrics",
}
REFUSED = {
    "locked_via_dotdot": "outside the workspace",
    "locked_via_symlink": "creates a symlink",
    "edit_the_probe": "outside the workspace",
    "edit_locked_data": "data.py: locked file",
}


@pytest.fixture(scope="module")
def contract(dense):
    reading = read_instruction(INSTRUCTION, workload_files(dense))
    return make_contract(dense, "tiny", INSTRUCTION, reading)


@pytest.fixture(scope="module")
def baseline(dense, contract, tmp_path_factory):
    record = run_trial(prepare(dense, "tiny", contract_hash=contract.contract_hash),
                       tmp_path_factory.mktemp("baseline"))
    assert record.status is TrialStatus.OK, record.error
    return record


def test_the_cheat_catalog_is_complete():
    assert {p.stem for p in CHEATS.glob("*.diff")} == set(RUNNABLE) | set(REFUSED)


@pytest.mark.parametrize("cheat", sorted(RUNNABLE))
def test_cheat_is_judged_invalid_with_its_reason(dense, contract, baseline, tmp_path, cheat):
    spec = prepare(dense, "tiny", {}, [str(CHEATS / f"{cheat}.diff")],
                   contract_hash=contract.contract_hash)
    record = run_trial(spec, tmp_path)
    verdict = verify(contract, baseline, record)
    assert not verdict.valid, f"{cheat} passed verification"
    assert any(RUNNABLE[cheat] in reason for reason in verdict.reasons), verdict.reasons


@pytest.mark.parametrize("cheat", sorted(REFUSED))
def test_cheat_is_refused_before_running(dense, tmp_path, cheat):
    with pytest.raises(PatchRefused, match=REFUSED[cheat]):
        prepare(dense, "tiny", {}, [str(CHEATS / f"{cheat}.diff")])


def test_an_honest_patch_passes_every_check(dense, contract, baseline, tmp_path):
    spec = prepare(dense, "tiny", {}, ["sdpa_attention"], contract_hash=contract.contract_hash)
    verdict = verify(contract, baseline, run_trial(spec, tmp_path))
    assert verdict.valid, verdict.reasons


def test_memory_over_the_contract_capacity_is_invalid(dense, baseline, contract):
    small = contract.model_copy(update={"mem_cap_bytes": 100 * 2**20}).sealed()
    verdict = verify(small, baseline, baseline.model_copy(update={"contract_hash": None}))
    assert any("peak memory over the capacity" in r for r in verdict.reasons), verdict.reasons
