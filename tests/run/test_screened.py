"""The search screens a patched trial's arrivals against the Doctor's baseline before the
searcher is told (``run.screened``): a trial whose lines the harness's clock contradicts is
recorded invalid with the reason, so it ranks nowhere and takes none of Apply's slots."""

import pytest

from infrarsi.contract import Contract
from infrarsi.objective import steady_step_time_s
from infrarsi.records.trial import PatchRef, TrialRecord, TrialStatus
from infrarsi.run.screened import screened
from infrarsi.trial.arrivals import Timing
from infrarsi.workloads import find

PATCH = PatchRef(id="p.diff", sha256="0", catalog=False, paths=["model.py"])


def _contract(objective: str) -> Contract:
    return Contract.model_validate(
        {
            "workload": "dense-1node",
            "scale": "tiny",
            "instruction": "x",
            "objective": objective,
            "invariants": {
                "tokens_per_step": 512,
                "steps": 60,
                "seeds": {"seed": 1},
                "data_fingerprint": "x",
            },
            "correctness": {"loss_tolerance": 0.01},
            "editable": ["model.py"],
            "locked": {},
        }
    ).sealed()


def _record(first=0.1, steps_s=0.1, start=3.0, tail=1.0, knobs=None, patches=(PATCH,), tmp=None):
    """A probe trial of 60 steps: its start line at ``start`` s, a ``first`` s first step,
    the others ``steps_s`` each, ``tail`` s to exit."""
    times = [first] + [steps_s] * 59
    e2e = start + sum(times) + tail
    return TrialRecord.model_validate(
        {
            "trial_id": "t",
            "workload": "dense-1node",
            "scale": "tiny",
            "status": "ok",
            "knobs": {"compile": "off", **(knobs or {})},
            "patches": [p.model_dump() for p in patches],
            "locked_files": {},
            "mem_cap_bytes": None,
            "timeout_s": 60,
            "started_unix_s": 0,
            "cost_s": e2e,
            "trial_dir": str(tmp or ""),
            "metrics": {
                "step_time_s": steps_s,
                "step_time_cv": 0.0,
                "e2e_time_s": e2e,
                "train_time_s": sum(times),
                "startup_time_s": e2e - sum(times),
                "warmup_overhead_s": 0.0,
                "compile_time_s": 0.0,
                "tokens_per_step": 512,
                "tokens_per_s": 512 / steps_s,
                "peak_mem_bytes": [100],
                "loss": [1.0] * 60,
                "step_times_s": times,
                "outside_train_span_s": sum(times),
                "outside_span_steps": 60,
                "harness_step_times_s": times,
                "harness_step_time_s": steps_s,
                "harness_tail_s": tail,
                "steps": 60,
                "warmup_steps": 2,
                "ranks": 1,
            },
        }
    )


@pytest.fixture(scope="module")
def doctor_timing() -> Timing:
    return Timing.of([_record(patches=()), _record(patches=())])


def test_a_rehearsal_inside_the_first_step_is_invalid_in_the_search(doctor_timing, tmp_path):
    dense = find("dense-1node")
    rehearsed = _record(first=6.0, steps_s=0.002, tmp=tmp_path)  # the run trained in step 0
    (tmp_path / "record.json").write_text("{}")
    out = screened(rehearsed, _contract("tokens_per_s"), dense, {"compile": "off"}, doctor_timing)
    assert out.status is TrialStatus.INVALID
    assert out.error.startswith("arrivals against the Doctor's baseline:")
    assert "inside a warm-up step" in out.error
    assert TrialRecord.load(tmp_path / "record.json").status is TrialStatus.INVALID  # saved


def test_what_the_screen_leaves_alone(doctor_timing):
    dense = find("dense-1node")
    throughput, e2e = _contract("tokens_per_s"), _contract("e2e_time")
    rehearsed = _record(first=6.0, steps_s=0.002)
    honest = _record(steps_s=0.08)
    assert screened(honest, throughput, dense, {}, doctor_timing).status is TrialStatus.OK
    # the same lines under an end-to-end objective (launch to exit is what it compares), with
    # no patch (the workload's own code), or without a Doctor's baseline: not screened
    assert screened(rehearsed, e2e, dense, {}, doctor_timing).status is TrialStatus.OK
    unpatched = _record(first=6.0, steps_s=0.002, patches=())
    assert screened(unpatched, throughput, dense, {}, doctor_timing).status is TrialStatus.OK
    assert screened(rehearsed, throughput, dense, {}, None).status is TrialStatus.OK
    # a config that switches compilation on compiles in its first steps: its one-time work
    # is not judged against a baseline that does not compile (its start line still is)
    compiled = _record(first=6.0, steps_s=0.1, knobs={"compile": "default"})
    assert screened(compiled, throughput, dense, {"compile": "off"}, doctor_timing).status is (
        TrialStatus.OK
    )
    early = _record(start=1.0)  # a probe opened at import: two seconds early
    refused = screened(early, throughput, dense, {}, doctor_timing)
    assert "a probe opened before the workload's own start" in refused.error


def test_a_patched_trial_ranks_on_its_window_never_on_its_lines_alone(doctor_timing, tmp_path):
    """A run rehearsed before its steps (a little of it, within every check's slack): its
    lines claim 15% faster steps, its window against the Doctor's baseline shows no saving;
    the search ranks it on the window. An honest faster patch ranks on its lines and window
    alike; a knobs-only trial (the workload's own code) on its lines."""
    dense = find("dense-1node")
    throughput = _contract("tokens_per_s")
    rehearsed = _record(start=3.9, steps_s=0.085, tmp=tmp_path)
    (tmp_path / "record.json").write_text("{}")
    out = screened(rehearsed, throughput, dense, {"compile": "off"}, doctor_timing)
    assert out.status is TrialStatus.OK
    assert out.metrics.harness_step_time_s == pytest.approx(0.085)  # what its lines claim
    assert out.window_step_time_s == pytest.approx(0.1 + 0.015 / 60)  # what its window shows
    assert steady_step_time_s(out) == pytest.approx(out.window_step_time_s)  # ranked on it
    assert TrialRecord.load(tmp_path / "record.json").window_step_time_s == out.window_step_time_s
    base = {"compile": "off"}
    honest = screened(_record(steps_s=0.08), throughput, dense, base, doctor_timing)
    assert steady_step_time_s(honest) == pytest.approx(0.1 + (5.9 * 0.8 - 5.9) / 60)
    assert honest.window_step_time_s < 0.1
    plain = _record(steps_s=0.08, patches=())
    assert screened(plain, throughput, dense, base, doctor_timing).window_step_time_s is None
    assert steady_step_time_s(plain) == pytest.approx(0.08)


def test_one_time_work_is_judged_in_the_search_only_at_the_baselines_knobs(doctor_timing):
    """Work before the steps is in the window, which ranks the trial: a late start line is
    not refused in the search (at its few steps, within a loaded host's start-up noise); a
    claimed saving the clock does not show is, at the baseline's knobs only — another knob
    (more ranks) may start up slower, and there its window ranks it instead."""
    dense = find("dense-1node")
    throughput, base = _contract("tokens_per_s"), {"compile": "off"}
    late = screened(_record(start=7.0), throughput, dense, base, doctor_timing)
    assert "launch to exit shows 4.00 s more" in late.error
    assert "before its steps began" not in late.error
    more_ranks = _record(start=7.0, knobs={"nproc": 4})
    ranked = screened(more_ranks, throughput, dense, base, doctor_timing)
    assert ranked.status is TrialStatus.OK
    assert steady_step_time_s(ranked) == pytest.approx(0.1 + 4.0 / 60)  # its start-up charged
