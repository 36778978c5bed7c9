"""Every ``verify`` check decided on recorded evidence, without running a trial: records and
parameter files are made here, the decision is the pure function's."""

import math
import random
import statistics

import pytest
import torch

from infrarsi.contract import Contract, Equivalence
from infrarsi.doctor.calibrate import tolerances
from infrarsi.records.trial import Evaluation, PatchRef, TrialRecord
from infrarsi.verify import loss_drift, sampled_drift_sd, verify

LOSS = [5.0, 4.6, 4.3, 4.1, 3.9, 3.8, 3.7, 3.6]


def _contract(objective="e2e_time", equivalence=Equivalence(), cap=None) -> Contract:
    return Contract.model_validate(
        {
            "workload": "dense-1node",
            "scale": "tiny",
            "instruction": "cut time",
            "objective": objective,
            "invariants": {
                "tokens_per_step": 512,
                "steps": 8,
                "seeds": {"seed": 1},
                "data_fingerprint": "x",
            },
            "correctness": {"loss_tolerance": 0.005},
            "equivalence": equivalence.model_dump(),
            "mem_cap_bytes": cap,
            "editable": ["model.py"],
            "locked": {"train.py": "aa"},
        }
    ).sealed()


def _weights(tmp_path, name, **offsets) -> str:
    """Parameters a = 1 + offset_a, b = ..., written where an evaluation would point."""
    params = {n: torch.full((4,), 1.0 + offsets.get(n, 0.0)) for n in ("a", "b", "bias")}
    path = tmp_path / f"{name}.pt"
    torch.save(params, path)
    return str(path)


def _record(
    contract,
    tmp_path=None,
    name="base",
    knobs=None,
    loss=LOSS,
    steps=None,
    e2e=10.0,
    span=None,
    step_s=0.2,
    seen=None,
    final=None,
    initial=0,
    eval_loss=3.5,
    evaluation=True,
    inert=(),
    peaks=(100,),
    patches=(),
) -> TrialRecord:
    steps_s = steps or [step_s] * len(loss)
    span = sum(steps_s) if span is None else span
    metrics = {
        "step_time_s": step_s,
        "step_time_cv": 0.0,
        "e2e_time_s": e2e,
        "train_time_s": sum(steps_s),
        "startup_time_s": e2e - sum(steps_s),
        "warmup_overhead_s": 0.0,
        "compile_time_s": 0.0,
        "tokens_per_step": 512,
        "tokens_per_s": 512 / step_s,
        "peak_mem_bytes": list(peaks),
        "loss": list(loss),
        "step_times_s": steps_s,
        "outside_train_span_s": span,
        "outside_span_steps": len(loss),
        "harness_step_times_s": seen or steps_s,
        "harness_step_time_s": step_s,
        "harness_tail_s": 0.5,
        "steps": len(loss),
        "warmup_steps": 2,
        "ranks": len(peaks),
    }
    ev = None
    if evaluation and tmp_path is not None:
        ev = Evaluation(
            final_weights=_weights(tmp_path, name, **(final or {"a": 0.1, "b": 0.1, "bias": 0.01})),
            initial_weights=_weights(tmp_path, f"{name}0") if initial == 0 else None,
            eval_loss=eval_loss,
            initial_eval_loss=6.0,
            inert_params=list(inert),
        )
    return TrialRecord.model_validate(
        {
            "trial_id": name,
            "workload": "dense-1node",
            "scale": "tiny",
            "status": "ok",
            "knobs": {"micro_batch": 2, "nproc": 2, "precision": "fp32", **(knobs or {})},
            "patches": [p.model_dump() for p in patches],
            "locked_files": {"train.py": "aa"},
            "contract_hash": contract.contract_hash,
            "mem_cap_bytes": contract.mem_cap_bytes,
            "timeout_s": 60,
            "started_unix_s": 0,
            "cost_s": e2e,
            "metrics": metrics,
            "evaluation": ev.model_dump() if ev else None,
        }
    )


def _reasons(contract, base, cand) -> str:
    return " | ".join(verify(contract, base, cand).reasons)


def test_the_same_evidence_passes(tmp_path):
    c = _contract()
    base = _record(c, tmp_path)
    assert verify(c, base, _record(c, tmp_path, "cand")).valid


def test_workload_locked_files_and_patch_paths(tmp_path):
    c = _contract()
    base = _record(c, tmp_path)
    cand = _record(c, tmp_path, "cand", loss=LOSS[:4])
    assert "steps differ" in _reasons(c, base, cand)
    cand = _record(c, tmp_path, "cand").model_copy(update={"locked_files": {"train.py": "bb"}})
    assert "locked files changed: train.py" in _reasons(c, base, cand)
    bad = PatchRef(id="x.diff", sha256="0", catalog=False, paths=["train.py"])
    assert "outside the editable set" in _reasons(
        c, base, _record(c, tmp_path, "cand", patches=[bad])
    )
    assert "another contract" in _reasons(
        c, base, _record(_contract("tokens_per_s"), tmp_path, "cand")
    )


def test_times_from_another_host_are_not_compared(tmp_path):
    c = _contract()
    base = _record(c, tmp_path).model_copy(update={"fingerprint": "aaaa", "node": "n1"})
    same = _record(c, tmp_path, "cand").model_copy(update={"fingerprint": "aaaa", "node": "n2"})
    assert verify(c, base, same).valid  # another node of the same kind: comparable
    other = same.model_copy(update={"fingerprint": "bbbb"})
    assert "ran on another host (fingerprint bbbb, node n2)" in _reasons(c, base, other)


def test_memory_over_the_capacity_or_unmeasured(tmp_path):
    c = _contract(cap=1000)
    base = _record(c, tmp_path)
    assert "over the capacity" in _reasons(c, base, _record(c, tmp_path, "cand", peaks=(1001,)))
    assert "was not measured" in _reasons(c, base, _record(c, tmp_path, "cand", peaks=(None,)))


def test_loss_drift_and_its_calibrated_tolerance_per_kind(tmp_path):
    sampled = [v * (1.2 if i % 2 else 0.9) for i, v in enumerate(LOSS)]  # another micro-batch
    learned, pointwise = loss_drift(LOSS, sampled, 3)
    assert pointwise == pytest.approx(0.2)
    c = _contract()
    base = _record(c, tmp_path)
    split = _record(c, tmp_path, "cand", knobs={"micro_batch": 4}, loss=sampled)
    assert "loss drift" in _reasons(c, base, split)  # no calibration: the contract's 0.5%
    eq = tolerances({"loss_split": 0.25, "weight_rerun": 0.0})
    calibrated = _contract(equivalence=eq)
    base, split = (
        _record(calibrated, tmp_path, n, knobs=k, loss=losses)
        for n, k, losses in (("base", {}, LOSS), ("cand", {"micro_batch": 4}, sampled))
    )
    assert "loss drift" not in _reasons(calibrated, base, split)
    same_split = _record(calibrated, tmp_path, "cand", loss=sampled)  # keeps the split
    assert "loss drift" in _reasons(calibrated, base, same_split)


def test_reported_times_against_the_harness_clock(tmp_path):
    c = _contract()
    base = _record(c, tmp_path)
    forged = _record(c, tmp_path, "cand", step_s=0.05, span=1.6)
    assert "a faked timer or forged metrics" in _reasons(c, base, forged)
    moved = _record(
        c, tmp_path, "cand", steps=[1.0, 0.05, 0.05] + [0.2] * 5, span=1.6, seen=[0.2] * 8
    )
    assert "time moved between steps" in _reasons(c, base, moved)
    late = [0.2, 0.29, 0.11] + [0.2] * 5  # the reader was scheduled late once
    assert "time moved" not in _reasons(c, base, _record(c, tmp_path, "cand", seen=late))


def test_a_patch_under_a_throughput_objective_is_timed_by_the_harness_clock(tmp_path):
    """A patched candidate's steps must show their saving in launch to exit against the same
    knobs without it (the baseline here): lines held back to the end claim 1.5 s saved while
    launch to exit saves nothing; an honest patch's saving shows. Without a patch, or under an
    end-to-end objective, the arrivals are not judged this way."""
    c = _contract("tokens_per_s")
    patch = PatchRef(id="p.diff", sha256="0", catalog=False, paths=["model.py"])
    base = _record(c, tmp_path, e2e=4.0)
    burst = _record(c, tmp_path, "cand", e2e=4.0, step_s=0.01, patches=[patch])
    verdict = verify(c, base, burst)
    assert any("the steps claim 1.52 s saved over 8 steps" in r for r in verdict.reasons)
    assert any(
        r.startswith("harness clock: launch to exit, 4.00 s against base") for r in verdict.ran
    )
    honest = _record(c, tmp_path, "cand", e2e=3.3, step_s=0.1, patches=[patch])
    assert "the steps claim" not in _reasons(c, base, honest)
    knobs_only = _record(c, tmp_path, "cand", e2e=4.0, step_s=0.01)  # the workload's own code
    assert "the steps claim" not in _reasons(c, base, knobs_only)
    e2e = _contract()
    assert "the steps claim" not in _reasons(
        e2e, _record(e2e, tmp_path), _record(e2e, tmp_path, "cand", step_s=0.01, patches=[patch])
    )
    other_knobs = _record(c, tmp_path, "cand", knobs={"threads_per_rank": 1}, patches=[patch])
    assert "that run was not measured" in _reasons(c, base, other_knobs)


def test_missing_evidence_is_a_failure_not_a_pass(tmp_path):
    c = _contract()
    base = _record(c, tmp_path)
    assert "left no evaluation" in _reasons(c, base, _record(c, tmp_path, "c", evaluation=False))
    assert "no held-out loss" in _reasons(c, base, _record(c, tmp_path, "c", eval_loss=None))
    assert "saved no initial parameters" in _reasons(
        c, base, _record(c, tmp_path, "c", initial=None)
    )
    neither = verify(c, _record(c, evaluation=False), _record(c, evaluation=False))
    assert neither.valid and neither.not_checked  # a workload with no evaluation at all


def test_weights_held_out_loss_and_frozen_parameters(tmp_path):
    c = _contract()
    base = _record(c, tmp_path)
    other = _record(c, tmp_path, "c", final={"a": 0.1, "b": 0.12, "bias": 0.01})
    assert "trained a different model" in _reasons(c, base, other)
    assert "held-out loss" in _reasons(c, base, _record(c, tmp_path, "c", eval_loss=3.6))
    frozen = _record(c, tmp_path, "c", final={"a": 0.1, "b": 0.1, "bias": 0.0})
    assert "parameters that did not train: ['bias']" in _reasons(c, base, frozen)


def test_a_parameter_the_reference_model_gives_no_gradient_is_no_evidence(tmp_path):
    """The baseline moved ``bias`` by rounding alone (its gradient is zero in the reference
    model); a candidate that leaves it untouched computes the same function."""
    c = _contract()
    base = _record(c, tmp_path, inert=["bias"])
    skipped = _record(c, tmp_path, "c", final={"a": 0.1, "b": 0.1, "bias": 0.0})
    assert verify(c, base, skipped).valid, _reasons(c, base, skipped)


def test_tolerances_per_kind_of_change(tmp_path):
    """A candidate is judged by the floors of the kinds of change it makes: one that keeps the
    split is held to the strict base even where a split moves the weights a lot (MoE)."""
    eq = tolerances(
        {
            "weight_split": 0.02,
            "eval_split": 0.001,
            "weight_rerun": 0.0,
            "eval_rerun": 0.0,
            "weight_precision": 0.05,
            "weight_bf16": 0.05,
            "eval_bf16": 0.001,
            "eval_precision": 0.001,
        }
    )
    assert eq.tolerances(False) == (2e-4, 5e-5)
    assert eq.tolerances(False, {"split"}) == (pytest.approx(0.08), pytest.approx(0.004))
    c = _contract(equivalence=eq)
    base = _record(c, tmp_path)
    drift = {"a": 0.1, "b": 0.1 + 0.003, "bias": 0.01}  # ~2e-2 of what was learned
    same_split = _record(c, tmp_path, "c", final=drift)
    assert "trained a different model" in _reasons(c, base, same_split)
    other_split = _record(c, tmp_path, "c", final=drift, knobs={"micro_batch": 4})
    assert verify(c, base, other_split).valid, _reasons(c, base, other_split)


def test_uncalibrated_contracts_are_strict_and_say_why(tmp_path):
    eq = Equivalence()
    assert not eq.calibrated and eq.weight_rtol <= 2e-4 and eq.eval_rtol <= 2e-4
    c = _contract()
    base = _record(c, tmp_path)
    small = _record(
        c, tmp_path, "c", final={"a": 0.1, "b": 0.1005, "bias": 0.01}, knobs={"micro_batch": 4}
    )
    reasons = _reasons(c, base, small)
    assert "no tolerance was calibrated for a change of split" in reasons


def test_a_slowed_clock_fails_the_total_even_when_each_step_is_within_its_slack(tmp_path):
    """Steps of 40 ms reported at 0.7x: each is within a step's absolute slack, the span's
    total is not."""
    c = _contract()
    base = _record(c, tmp_path, step_s=0.04)
    slowed = _record(c, tmp_path, "c", steps=[0.028] * 8, span=0.32, seen=[0.04] * 8)
    assert "a faked timer or forged metrics" in _reasons(c, base, slowed)


def test_the_report_says_how_strong_the_evidence_was():
    from infrarsi.verify import evidence_strength

    assert evidence_strength(_contract(), []).startswith("strong")
    weaker = evidence_strength(
        _contract(),
        [
            "final parameters and held-out loss: the workload "
            "declares no evaluation (manifest 'evaluation')"
        ],
    )
    assert weaker.startswith("weaker") and "not calibrated: run doctor" in weaker
    calibrated = _contract(equivalence=tolerances({"loss_split": 0.1}))
    assert "calibrated per kind of change" in evidence_strength(
        calibrated, ["final parameters and held-out loss: the workload declares no evaluation"]
    )


def test_memory_held_outside_the_ranks(tmp_path):
    c = _contract()
    base = _record(c, tmp_path)
    base.metrics.launcher_peak_mem_bytes = 160 << 20
    parked = _record(c, tmp_path, "c")
    parked.metrics.launcher_peak_mem_bytes = 660 << 20
    assert "held where the ranks' capacity does not look" in _reasons(c, base, parked)
    same = _record(c, tmp_path, "c")
    same.metrics.launcher_peak_mem_bytes = 170 << 20
    assert verify(c, base, same).valid


def test_a_job_that_works_on_after_its_last_step(tmp_path):
    c = _contract()
    base = _record(c, tmp_path)
    ahead = _record(c, tmp_path, "c")
    ahead.metrics.harness_tail_s = 30.0
    assert "steps reported ahead of the work" in _reasons(c, base, ahead)


def test_a_sampled_loss_floor_is_its_spread_not_one_draw():
    """Two runs of one training that print other samples of its loss differ step by step by
    that sampling noise alone: the drift's spread is read from those differences. A draw whose
    noise happens to cancel in the first and last steps' means shows a small drift; its spread
    is the same as that of a draw where it does not."""
    rng = random.Random(0)
    noise = [rng.gauss(0, 0.1) for _ in LOSS]
    lucky = [v + e for v, e in zip(LOSS, noise)]
    learned, _ = loss_drift(LOSS, lucky, 3)
    sd = sampled_drift_sd(LOSS, lucky, 3)
    fall = (5.0 + 4.6 + 4.3) / 3 - (3.8 + 3.7 + 3.6) / 3
    spread = statistics.stdev(noise)
    assert sd == pytest.approx(spread * math.sqrt(2 / 3) / fall)
    assert sampled_drift_sd(LOSS, LOSS, 3) == 0.0  # the same samples: no spread
    assert sampled_drift_sd([1.0, 1.0, 1.0], [1.1, 0.9, 1.0], 1) == 0.0  # no fall: no ratio
    assert sampled_drift_sd(LOSS, LOSS[:-1], 3) == 0.0  # curves of different lengths
    shifted = [v + 0.05 for v in LOSS]  # a constant offset moves no fall and has no spread
    assert sampled_drift_sd(LOSS, shifted, 3) == pytest.approx(0.0, abs=1e-12)
    assert learned >= 0 and sd > 0


@pytest.mark.parametrize(
    "ownership, owned",
    [
        ("pid namespace; network namespace of its own", True),
        ("pid namespace in a user namespace; network namespace of its own", True),
        ("subreaper (no namespace: unshare(user): Operation not permitted); host network", True),
        ("off: the trial's init did not start", False),
        ("", False),
    ],
)
def test_the_verdict_says_who_owned_the_candidates_processes(tmp_path, ownership, owned):
    """As root, in a user namespace or as the trial's subreaper, the harness owned every
    process (none could outlive the launcher unnoticed): the verdict says what ran; an init
    that did not start leaves that not checked, said so."""
    c = _contract()
    base = _record(c, tmp_path)
    cand = _record(c, tmp_path, "cand").model_copy(update={"ownership": ownership})
    verdict = verify(c, base, cand)
    line = [r for r in verdict.ran if r.startswith("process ownership")]
    unchecked = [r for r in verdict.not_checked if r.startswith("process ownership")]
    assert verdict.valid
    assert (line, unchecked) == (
        ([f"process ownership: {ownership} (no process outlived the launcher)"], [])
        if owned
        else ([], [f"process ownership: {ownership or 'not recorded'}"])
    )


def test_a_challenge_seed_whose_effect_cannot_be_seen_is_said(tmp_path):
    """Baselines at two challenge seeds that began from the same parameters and ran the same
    curve: the seed the harness set changed nothing (a script that ignores it), so a result
    prepared for one seed would pass; another initialisation, or another curve (the data
    order), shows it took effect."""
    from infrarsi.verify.evidence import challenge_unseen

    c = _contract()
    a = _record(c, tmp_path, "r0").model_copy(update={"seed": 11})
    b = _record(c, tmp_path, "r1").model_copy(update={"seed": 22})
    note = challenge_unseen([a, b])
    assert note is not None and "seeds 11 and 22" in note, note
    other_start = b.evaluation.model_copy(
        update={"initial_weights": _weights(tmp_path, "moved0", a=0.5)}
    )
    assert challenge_unseen([a, b.model_copy(update={"evaluation": other_start})]) is None
    other_curve = b.metrics.model_copy(update={"loss": [x + 0.01 for x in LOSS]})
    assert challenge_unseen([a, b.model_copy(update={"metrics": other_curve})]) is None
    # one seed, no seed, or no initial parameters saved: nothing to tell either way
    assert challenge_unseen([a, a.model_copy(update={"trial_id": "again"})]) is None
    unseeded = [r.model_copy(update={"seed": None}) for r in (a, b)]
    assert challenge_unseen(unseeded) is None
    unsaved = b.evaluation.model_copy(update={"initial_weights": None})
    assert challenge_unseen([a, b.model_copy(update={"evaluation": unsaved})]) is None


def test_the_doctor_calibrates_the_weights_a_job_saves_without_a_held_out_loss(tmp_path):
    """One evidence, one calibration: a job whose weights the harness saves (the observer's)
    but which has no held-out loss is calibrated on its weights, which Apply judges it by."""
    from infrarsi.doctor.calibrate import distances, evidence_of

    c = _contract()
    base = _record(c, tmp_path, "base", eval_loss=None)
    other = _record(c, tmp_path, "other", final={"a": 0.1, "b": 0.1003, "bias": 0.01})
    assert base.evaluation is not None and other.evaluation is not None
    base.evaluation.initial_eval_loss = other.evaluation.eval_loss = None
    assert evidence_of(base) == (True, False)
    got = distances(base, other)
    assert set(got) == {"weight"} and 0 < got["weight"] < 1e-2
    full = _record(c, tmp_path, "full", final={"a": 0.1, "b": 0.1003, "bias": 0.01})
    both = _record(c, tmp_path, "both", eval_loss=3.6)
    assert set(distances(full, both)) == {"weight", "eval"}


def test_a_new_check_is_one_function_and_one_registry_line(tmp_path, monkeypatch):
    """Every check ``compare`` makes is a row of ``verify.CHECKS``: one more row is judged on
    every candidate, and on a reference only where it says so."""
    import infrarsi.verify as verify_module
    from infrarsi.verify import CHECKS, Check, compare

    assert len({c.name for c in CHECKS}) == len(CHECKS)
    contract = _contract()
    base, cand = _record(contract, tmp_path), _record(contract, tmp_path, name="cand")
    assert verify(contract, base, cand).valid
    odd = Check.of("an odd name", lambda case: ["odd"] if "odd" in case.cand.trial_id else [])
    monkeypatch.setattr(verify_module, "CHECKS", (*CHECKS, odd))
    odd_steps = _record(contract, tmp_path, name="odd")
    assert verify(contract, base, odd_steps).reasons == ["odd"]
    reasons, _ = compare(contract, None, base, odd_steps, frozenset(), equivalence_only=True)
    assert "odd" not in reasons  # a reference is judged by the checks that say so alone
