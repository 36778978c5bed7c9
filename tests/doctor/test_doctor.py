"""Doctor on every reference workload at tiny scale, for real; and noise that it must notice."""

import json
from pathlib import Path

import pytest

from infrarsi.doctor import run_doctor
from infrarsi.doctor.noise import cv, min_detectable_effect
from infrarsi.doctor.run import build_report
from infrarsi.executors import LocalExecutor
from infrarsi.init import make_contract, read_instruction
from infrarsi.init.build import workload_files
from infrarsi.records.trial import TrialRecord
from infrarsi.workloads import find, reference_names

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", [n for n in reference_names() if n != "dense-1node"])
def test_doctor_json_on_each_workload(doctored, name):
    """``infrarsi doctor --json`` on each workload, run once per session
    (``conftest.doctored``; the adversarial tests judge under moe-1node's contracts): the
    2-node workloads skip the calibration trials (the same code as on one node, which the
    1-node workloads cover)."""
    done = doctored(name)
    _check_report(done.report, name, done.contract.read_text(), find(name).launch.nodes == 1)


def test_doctor_report_of_dense_1node_within_optimize(dense_optimized):
    """dense-1node's Doctor is the one the session's shared ``optimize`` ran (same code, same
    report; a Doctor of its own would cost another minute on two cores)."""
    run_dir = Path(dense_optimized.answer["run_dir"])
    _check_report(
        json.loads((run_dir / "doctor.json").read_text()),
        "dense-1node",
        (run_dir / "contract.yaml").read_text(),
    )


def _check_report(r: dict, name: str, frozen: str, calibrated: bool = True) -> None:
    """What every Doctor report holds, on any reference workload."""
    attributed = sum(r["phases"].values())
    # the phases are the slowest rank's at each step, compared with the mean of those steps
    assert abs(attributed - r["phase_step_time_s"]) <= 0.05 * r["phase_step_time_s"], r["phases"]
    assert r["unattributed_s"] == pytest.approx(r["phase_step_time_s"] - attributed)
    assert {"forward", "backward", "optimizer", "data"} <= set(r["phases"])
    assert 0 < r["mfu_pct"] < 100
    assert set(r["peak_flops"]) == {"fp32", "bf16"} and len(r["peak_mem_bytes"]) >= 2
    assert r["noise"]["cv_within"] >= 0 and r["noise"]["cv_between"] >= 0
    assert set(r["noise"]["mde_pct"]) == {"1", "3", "5"}
    assert r["noise"]["recommended_repeats"] >= 1
    # an end-to-end objective at tiny: start-up is most of the compared time (about 90% on two
    # cores), so a change to the steps can gain little end to end (Amdahl)
    assert r["noise"]["objective"] == "e2e_time" and 0.3 < r["noise"]["outside_share"] < 1
    assert r["noise"]["amdahl_bound"] == pytest.approx(1 / r["noise"]["outside_share"])
    assert r["top_ops"] and all("::" in o["name"] for o in r["top_ops"])
    knobs_and_patches = {k.name for k in find(name).knobs} | {p.id for p in find(name).patches}
    assert any(set(d["suggests"]) & knobs_and_patches for d in r["diagnosis"])
    assert "repeats: null" not in frozen  # the noise policy was filled in
    eq = r["equivalence"]  # calibrated on another batch split and bf16
    if calibrated:
        assert eq["calibrated"] and {"weight_fp32", "weight_bf16"} <= set(eq["floors"]), eq
        assert "calibrated: true" in frozen
    else:
        assert not eq["calibrated"] and "calibrated: false" in frozen


class _Recording(LocalExecutor):
    """A local executor that keeps the requests it was given."""

    def __init__(self, root):
        super().__init__(root)
        self.requests = []

    def resolve(self, request):  # every way a request runs (submit, run) resolves it here
        self.requests.append(request)
        return super().resolve(request)


def test_the_doctors_noise_is_that_of_its_own_runs_and_rises_when_half_are_slowed(tmp_path, dense):
    """The wiring, run for real: every Doctor trial goes through the executor given, the hook
    runs before each baseline run, and the noise figures are those of the runs it reports.
    How the noise responds to a machine that slows every other run is then checked on those
    same records with half of them slowed by a known factor (``build_report`` is a pure
    function of the runs): deterministic, where a burner beside the runs made it a race with
    whatever else the machine was doing (CI saw the "quiet" runs the noisier)."""
    # a throughput objective: the noise measured is that of the steps (end-to-end time at
    # tiny scale is mostly start-up)
    contract = make_contract(
        dense,
        "tiny",
        "maximise throughput",
        read_instruction("maximise throughput", workload_files(dense)),
    )
    executor = _Recording(tmp_path / "quiet")
    hooked = []
    report = run_doctor(
        contract,
        2,
        tmp_path / "quiet",
        before_run=hooked.append,
        calibrate_tolerances=False,
        executor=executor,
    )
    # every Doctor trial (2 baseline runs, the profiled run) went through the executor given
    assert hooked == [0, 1]
    assert len(executor.requests) == 3 == len(report.trials)
    assert [r.extra_env for r in executor.requests][-1].get("INFRARSI_PROFILE_STEP")
    runs = [TrialRecord.load(Path(t.trial_dir) / "record.json") for t in report.trials[:2]]
    assert [r.trial_id for r in runs] == [r.trial_id for r in report.runs]
    steps = [r.step_time_s for r in report.runs]
    assert report.noise.cv_between == pytest.approx(cv(steps))
    assert report.noise.mde_pct["3"] == pytest.approx(
        100 * min_detectable_effect(report.noise.cv_between, 3, 2)
    )

    def slowed(record, factor):
        measured = record.measured.model_copy(
            update={"step_times_s": [t * factor for t in record.measured.step_times_s]}
        )
        return record.model_copy(update={"metrics": measured})

    # the runs' own spread is this machine's (CI saw a cv of 0.22 over 4 tiny runs, where
    # slowing the odd ones happened to even them out): the comparison starts from steady runs,
    # each the first run's steps, so the spread added is the only spread there is; four runs,
    # the two measured twice each (what is compared is their step times alone)
    first = runs[0].measured.step_times_s
    steady_runs = [
        r.model_copy(update={"metrics": r.measured.model_copy(update={"step_times_s": first})})
        for r in runs * 2
    ]
    noisy_runs = [slowed(r, 1.5) if i % 2 else r for i, r in enumerate(steady_runs)]
    args = (contract, dense, report.knobs, report.hardware)
    again = build_report(*args, runs, None)
    steady = build_report(*args, steady_runs, None)
    noisy = build_report(*args, noisy_runs, None)
    assert again.noise.cv_between == pytest.approx(report.noise.cv_between)
    assert steady.noise.cv_between == pytest.approx(0.0, abs=1e-12)
    assert noisy.noise.cv_between == pytest.approx(cv([1.0, 1.5, 1.0, 1.5]))
    assert noisy.noise.cv_between > 0.2  # 1 and 1.5 alternating: a cv of 0.23 (sample sd)
    assert noisy.noise.mde_pct["3"] > steady.noise.mde_pct["3"]
    assert noisy.noise.recommended_repeats >= steady.noise.recommended_repeats
