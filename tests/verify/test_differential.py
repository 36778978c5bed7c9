"""A patch is judged against the same knobs without it, never by a knob's tolerance: decided
on recorded evidence (records and parameter files made here), the rule's pure function."""

import pytest
from conftest import FIXTURES
from test_checks import _contract, _record

from infrarsi.doctor.calibrate import tolerances
from infrarsi.records.trial import PatchRef
from infrarsi.verify import verify
from infrarsi.verify.reference import References, Role, needed
from infrarsi.workloads import find, load_manifest

PATCH = [PatchRef(id="p.diff", sha256="x", catalog=False, paths=["model.py"])]
LEARNED = {"a": 0.1, "b": 0.1, "bias": 0.01}  # the baseline's final offsets from 1.0


def _moved(share: float) -> dict[str, float]:
    """Final offsets ``share`` of what the baseline learned away from it (on ``b``)."""
    return {**LEARNED, "b": 0.1 + share * 0.2002 / 2}


@pytest.fixture
def calibrated():
    """An MoE-like contract: a split moves the weights by 2e-2, bf16 by 3e-2."""
    return _contract(
        equivalence=tolerances(
            {
                "weight_split": 0.02,
                "eval_split": 0.001,
                "weight_rerun": 0.0,
                "eval_rerun": 0.0,
                "weight_precision": 0.03,
                "weight_bf16": 0.03,
                "eval_bf16": 0.001,
                "eval_precision": 0.001,
            }
        )
    )


def test_a_patch_cannot_borrow_a_knobs_tolerance(calibrated, tmp_path):
    """A patch that moves the weights 3e-2 on its own (attention's scores removed, say), run
    with another micro-batch: the kinds rule alone judged it by the split's tolerance and
    accepted it; against the same knobs without the patch it is refused."""
    c = calibrated
    base = _record(c, tmp_path, "base")
    ref = _record(c, tmp_path, "ref", knobs={"micro_batch": 4}, final=_moved(0.002))
    cheat = _record(
        c, tmp_path, "cheat", knobs={"micro_batch": 4}, final=_moved(0.032), patches=PATCH
    )
    alone = verify(c, base, cheat)
    assert not alone.valid and "that run was not measured" in alone.reasons[0]
    verdict = verify(c, base, cheat, References(same_knobs=ref))
    assert not verdict.valid
    assert any("trained a different model" in r for r in verdict.reasons), verdict.reasons
    assert any(r.startswith("same-knob reference: ref") for r in verdict.ran), verdict.ran


def test_an_honest_patch_with_other_knobs_passes_against_its_same_knob_reference(
    calibrated, tmp_path
):
    c = calibrated
    base = _record(c, tmp_path, "base")
    ref = _record(c, tmp_path, "ref", knobs={"micro_batch": 4}, final=_moved(0.02))
    honest = _record(
        c, tmp_path, "honest", knobs={"micro_batch": 4}, final=_moved(0.02 + 1e-5), patches=PATCH
    )
    verdict = verify(c, base, honest, References(same_knobs=ref))
    assert verdict.valid, verdict.reasons
    assert "same-knob reference: ref (its knobs judged by split)" in verdict.ran


def test_the_same_knob_reference_is_itself_judged_against_the_baseline(calibrated, tmp_path):
    c = calibrated
    base = _record(c, tmp_path, "base")
    ref = _record(c, tmp_path, "ref", knobs={"micro_batch": 4}, final=_moved(0.5))
    cand = _record(c, tmp_path, "cand", knobs={"micro_batch": 4}, final=_moved(0.5), patches=PATCH)
    verdict = verify(c, base, cand, References(same_knobs=ref))
    assert not verdict.valid
    assert verdict.reasons[0].startswith("the same knobs without the patch, against the baseline")


def test_a_patch_on_the_baselines_knobs_is_judged_against_the_baseline_strictly(
    calibrated, tmp_path
):
    c = calibrated
    base = _record(c, tmp_path, "base")
    small = _record(c, tmp_path, "small", final=_moved(0.003), patches=PATCH)
    verdict = verify(c, base, small)
    assert not verdict.valid and "trained a different model" in " ".join(verdict.reasons)
    assert "same-knob reference: the baseline (the patch keeps its knobs)" in verdict.ran


def _bf16_case(c, tmp_path, patch_at_fp32: float, bf16_from_fp32: float):
    """Baseline fp32; the bf16 reference 3e-2 from its fp32 run (the baseline's knobs); the
    patch's fp32 run ``patch_at_fp32`` from the fp32 reference; the bf16 candidate
    ``bf16_from_fp32`` from its own fp32 run."""
    bf16 = {"precision": "bf16"}
    base = _record(c, tmp_path, "base")
    fp32_ref = _record(c, tmp_path, "fp32ref")
    ref = _record(c, tmp_path, "ref", knobs=bf16, final=_moved(0.03))
    fp32_cand = _record(c, tmp_path, "fp32cand", final=_moved(patch_at_fp32), patches=PATCH)
    cand = _record(
        c, tmp_path, "cand", knobs=bf16, final=_moved(patch_at_fp32 + bf16_from_fp32), patches=PATCH
    )
    refs = References(same_knobs=ref, fp32_same_knobs=fp32_ref, fp32_candidate=fp32_cand)
    return base, cand, refs


def test_a_bf16_candidates_patch_is_judged_at_fp32(calibrated, tmp_path):
    """An approximation (a tanh GELU: 3.5e-3) paired with bf16 hides inside bf16's tolerance;
    at fp32 it is seen."""
    base, cand, refs = _bf16_case(calibrated, tmp_path, patch_at_fp32=3.5e-3, bf16_from_fp32=0.03)
    assert verify(calibrated, base, cand, References(same_knobs=refs.same_knobs)).valid is False
    verdict = verify(calibrated, base, cand, refs)
    assert not verdict.valid
    assert any(r.startswith("the patch at fp32") for r in verdict.reasons), verdict.reasons


def test_a_patch_that_runs_fp32_under_a_bf16_label_is_refused(calibrated, tmp_path):
    base, cand, refs = _bf16_case(calibrated, tmp_path, patch_at_fp32=0.0, bf16_from_fp32=0.0)
    verdict = verify(calibrated, base, cand, refs)
    assert not verdict.valid
    assert any("not the precision that ran" in r for r in verdict.reasons), verdict.reasons


def test_an_honest_bf16_patch_passes_every_comparison(calibrated, tmp_path):
    base, cand, refs = _bf16_case(calibrated, tmp_path, patch_at_fp32=1e-5, bf16_from_fp32=0.03)
    verdict = verify(calibrated, base, cand, refs)
    assert verdict.valid, verdict.reasons
    assert [r.split(":")[0] for r in verdict.ran] == [
        "same-knob reference",
        "the patch at fp32",
        "the precision that ran",
    ]


def test_which_runs_a_candidate_needs():
    dense = find("dense-1node")
    base = {"micro_batch": 2, "nproc": 2, "precision": "fp32"}
    assert needed(dense, base, {**base, "micro_batch": 4}, []) == {}
    assert needed(dense, base, base, ["p.diff"]) == {}
    split = {**base, "micro_batch": 4}
    assert needed(dense, base, split, ["p.diff"]) == {Role.SAME_KNOBS: (split, [])}
    bf16 = {**base, "micro_batch": 4, "precision": "bf16"}
    assert needed(dense, base, bf16, ["p.diff"]) == {
        Role.SAME_KNOBS: (bf16, []),
        Role.FP32_SAME_KNOBS: (split, []),
        Role.FP32_CANDIDATE: (split, ["p.diff"]),
    }


def test_runs_are_compared_at_one_seed_and_the_challenge_seed_is_said(calibrated, tmp_path):
    """A challenge seed the harness drew is set for the baseline, the references and the
    candidate alike: a candidate judged against a run at another seed is refused."""
    c = calibrated
    base = _record(c, tmp_path, "base").model_copy(update={"seed": 77})
    same = _record(c, tmp_path, "same", patches=PATCH).model_copy(update={"seed": 77})
    verdict = verify(c, base, same)
    assert verdict.valid, verdict.reasons
    assert any(r.startswith("challenge seed: 77") for r in verdict.ran), verdict.ran
    known = _record(c, tmp_path, "known", patches=PATCH)  # the contract's seed
    verdict = verify(c, base, known)
    assert not verdict.valid
    assert (
        "ran with the contract's seed, the run it is judged against with seed 77"
        in (verdict.reasons[0])
    )


def test_a_challenge_seed_sets_every_seed_parameter_or_the_bootstraps_offset():
    from infrarsi.trial import prepare
    from infrarsi.trial.launch import SEED_BY_BOOTSTRAP, SEED_BY_PARAMETER, seed_setting

    dense = find("dense-1node")
    assert prepare(dense, "tiny", {}).params()["seed"] == 1234
    spec = prepare(dense, "tiny", {}, seed=77)
    assert spec.params()["seed"] == 77 and seed_setting(spec) == SEED_BY_PARAMETER
    toy = load_manifest(FIXTURES / "toy")  # seeds itself: torch.manual_seed(0)
    spec = prepare(toy, "tiny", {}, seed=77)
    assert spec.params() == prepare(toy, "tiny", {}).params()
    assert seed_setting(spec) == SEED_BY_BOOTSTRAP
