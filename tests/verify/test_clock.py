"""The harness's clock for a throughput objective, decided on recorded timings without a trial:
what the arrivals of a run's lines say (``trial.arrivals``), the step a patch is charged by the
window the kernel bounds (``verify.clock``), the checks the search screens arrivals with, and
the steps the Doctor times a patch over (``doctor.noise``)."""

import statistics

import pytest
from test_checks import _contract  # the checks' own minimal contract, beside this file

from infrarsi.apply.rounds import harness_time
from infrarsi.contract import NoisePolicy
from infrarsi.doctor import noise
from infrarsi.records.trial import PatchRef, TrialMetrics, TrialRecord
from infrarsi.trial.arrivals import Timing, arrivals, held_back, paired_windows, window
from infrarsi.trial.filewatch import POLL_S
from infrarsi.verify import clock
from infrarsi.verify.reference import References

PATCH = PatchRef(id="p.diff", sha256="0", catalog=False, paths=["model.py"])


def _metrics(
    steps=10,
    step_s=0.1,
    warmup=2,
    first=0.5,
    start=3.0,
    tail=1.0,
    seen=None,
    reported=None,
    opened=2.0,
    saved=None,
) -> TrialMetrics:
    """A probe run: launch, its start line at ``start`` s, ``first`` s of a first step, the
    others ``step_s`` each, ``tail`` s to exit; the patched file first opened at ``opened``,
    the final parameters saved just before the tail ends (``saved``)."""
    times = reported or [first] + [step_s] * (steps - 1)
    gaps = seen or list(times)
    span = sum(g for g in gaps if g is not None)
    e2e = start + span + tail
    return TrialMetrics.model_validate(
        {
            "step_time_s": step_s,
            "step_time_cv": 0.0,
            "e2e_time_s": e2e,
            "train_time_s": sum(times),
            "startup_time_s": e2e - sum(times),
            "warmup_overhead_s": 0.0,
            "compile_time_s": 0.0,
            "tokens_per_step": 512,
            "tokens_per_s": 512 / step_s,
            "peak_mem_bytes": [100],
            "loss": [1.0] * steps,
            "step_times_s": times,
            "outside_train_span_s": span,
            "outside_span_steps": steps,
            "harness_step_times_s": gaps,
            "harness_step_time_s": statistics.median(g for g in gaps[warmup:] if g is not None),
            "harness_tail_s": tail,
            "first_open_s": {"model.py": opened} if opened is not None else {},
            "final_saved_s": (e2e - tail + 0.2) if saved is None else saved,
            "steps": steps,
            "warmup_steps": warmup,
            "ranks": 1,
        }
    )


def test_arrivals_say_where_the_time_went():
    m = _metrics()
    seen = arrivals(m)
    assert seen.start_line_s == pytest.approx(3.0)
    assert seen.warmup_s == pytest.approx(0.6)  # the first step and the second
    assert seen.steady_span_s == pytest.approx(0.8) and seen.steady_steps == 8
    assert seen.outside_steady_s == pytest.approx(3.0 + 0.6 + 1.0)


def test_step_records_held_back_and_released_together_are_refused():
    honest = _metrics(seen=[0.5] + [0.1 + 0.002 * (i % 3) for i in range(9)])
    assert held_back(honest) is None
    burst = _metrics(seen=[0.5] + [0.00002] * 9)  # every record sent at the end, times genuine
    assert "held back and released together" in held_back(burst)
    one_late_read = _metrics(seen=[0.5, 0.1, 0.19, 0.01] + [0.1] * 6)  # the reader was late once
    assert held_back(one_late_read) is None
    few = _metrics(steps=4, warmup=2, seen=[0.5, 0.1, 0.00001, 0.00001])
    assert held_back(few) is None  # two steady steps say nothing
    # times forged to match: most lines together, one carrying the time of all
    lumped = [0.5, 0.1] + [0.001] * 7 + [0.8]
    carried = _metrics(seen=lumped, reported=lumped)
    assert "most step lines arrived together, a few carried the time" in held_back(carried)
    checkpoints = [0.5, 0.1] + [0.1, 0.1, 0.1, 1.0] * 2  # a checkpoint every 4 steps: honest
    assert held_back(_metrics(seen=checkpoints, reported=checkpoints)) is None


def test_steps_shorter_than_the_readers_jitter_say_nothing_when_read_together():
    """What CI saw of an honest plain script on 2 busy cores: 1.5 ms steps whose lines the
    harness's reader, scheduled late, read three at a time. Steps that short cannot tell a
    held line from a late read; a held-back burst of 20 ms steps (the reference workloads' tiny
    scale) is still refused."""
    reported = [0.007, 0.0017, 0.0015, 0.0015, 0.0015, 0.0031]
    late_reads = _metrics(
        steps=6, warmup=1, reported=reported, seen=[None, 0.0, 0.0, 1e-4] + [0.0015, 0.0031]
    )
    assert held_back(late_reads) is None
    twenty_ms = [0.035] + [0.02] * 9
    burst = _metrics(reported=twenty_ms, seen=[0.035] + [0.00002] * 8 + [0.18])
    assert "held back and released together" in held_back(burst)


def test_lines_of_a_script_that_prints_no_time_are_refused_when_written_together():
    burst = _metrics(reported=[0.0] * 10, seen=[None] + [0.00003] * 9)
    assert "within 1.0 ms of the line before" in held_back(burst)
    lumpy = _metrics(reported=[0.0] * 10, seen=[None] + [0.05, 0.05, 0.5] * 3)  # evaluations
    assert held_back(lumpy) is None


def test_the_window_runs_from_the_first_open_of_the_patched_files_to_the_last_save():
    m = _metrics(opened=2.0)
    start, end = window(m)
    assert start == 2.0 and end == pytest.approx(m.e2e_time_s - 0.8)
    assert window(m, ["other.py"])[0] == 0.0  # a file it never opened: from launch
    blind = _metrics(opened=None, saved=None).model_copy(update={"final_saved_s": None})
    assert window(blind) == (0.0, blind.e2e_time_s)  # no kernel moments: launch to exit


def test_two_runs_are_windowed_the_same_way():
    cand, ref = _metrics(opened=2.0), _metrics(opened=2.5)
    mine, theirs, how = paired_windows(cand, ref, ["model.py"])
    assert mine - theirs == pytest.approx(0.5)
    assert how == "the first open of the patched files to the last change of the final parameters"
    unsaved = ref.model_copy(update={"final_saved_s": None})
    mine, theirs, how = paired_windows(cand, unsaved, ["model.py"])
    assert how.endswith("to exit") and theirs == pytest.approx(unsaved.e2e_time_s - 2.5)
    new_file = paired_windows(cand, ref, ["helper.py"])  # opened by neither: from launch
    assert new_file[2].startswith("launch")


def test_a_patch_is_charged_every_second_it_moves_inside_its_window():
    ref = _metrics()
    assert clock.charged_step_s(_metrics(), ref, ["model.py"]) == pytest.approx(0.1)
    # the run rehearsed inside the first step: its steps look free, its window is as long
    rehearsed = _metrics(first=1.4, step_s=0.001, reported=[1.4] + [0.001] * 9)
    assert rehearsed.harness_step_time_s == pytest.approx(0.001)
    assert clock.charged_step_s(rehearsed, ref, ["model.py"]) == pytest.approx(
        0.1 + (1.4 + 0.009 - 1.4) / 10
    )
    # a faster tear-down after the final parameters are saved is no step's saving
    quick_exit = _metrics(tail=0.3).model_copy(update={"final_saved_s": ref.final_saved_s})
    assert clock.charged_step_s(quick_exit, ref, ["model.py"]) == pytest.approx(0.1)
    assert clock.charged_step_s(_metrics(steps=12), ref, ["model.py"]) is None  # two counts


def test_the_window_ends_no_earlier_than_the_last_step_line():
    """The final parameters' name written early (a placeholder) cannot end the window before
    the training's last step line arrived."""
    m = _metrics(saved=2.1)  # a "save" at import, the steps after it
    start, end = window(m)
    assert end == pytest.approx(m.e2e_time_s - 1.0)  # the last step line
    assert window(_metrics())[1] == pytest.approx(_metrics().e2e_time_s - 0.8)  # a real save


def test_an_impossible_charge_is_a_refusal_never_handed_to_the_lines():
    ref = _record(_metrics())
    # a window that opened near the end of the run: it cannot hold its 1.4 s of steps
    late_open = _record(_metrics(opened=4.3), [PATCH])
    timing = clock.timing_of(NoisePolicy(), [ref])
    charge = clock.bill(late_open, ref, timing)
    assert charge.step_s < 0
    assert "the window did not contain the run" in charge.impossible
    assert "charges -0.1300 s a step, the candidate's own lines say 0.1000 s" in charge.impossible
    assert charge.compared_s is None and harness_time(late_open, ref) is None
    # within what the window can save outside the steps (here its 1.8 s of set-up and tail)
    set_up_saving = _record(_metrics(start=2.4), [PATCH])  # 0.6 s less set-up in its window
    assert clock.bill(set_up_saving, ref, timing).impossible is None
    # below the lines by more than that: the window missed steps
    charge = clock.Charged(1.0, 4.0, "x", 0.02, 10, lines_s=0.3, room_s=1.0)
    assert "the window did not contain the run" in charge.impossible
    assert clock.Charged(3.0, 4.0, "x", 0.05, 10, lines_s=0.1, room_s=1.0).impossible is None
    verdict, _ = clock.judge(_contract("tokens_per_s"), ref, late_open, References())
    assert any("the window did not contain the run" in r for r in verdict), verdict


def test_the_start_line_is_judged_both_ways_against_that_configurations_start_ups():
    ref = Timing.of([_record(_metrics())])
    # work done before the steps began: the start line later than the warm-up may grow
    rehearsed = _metrics(start=3.0 + 1.4, step_s=0.002)
    assert "the run's work done before its steps began" in clock.late_start(rehearsed, ref)
    assert clock.late_start(_metrics(start=3.3), ref) is None
    assert "before its steps began" in " ".join(clock.moved_work(rehearsed, ref))
    assert clock.moved_work(rehearsed, ref, one_time=False) == []  # compiling: not judged
    # one slow start-up of the reference does not decide: judged against its earliest
    slow_once = Timing.of([_record(_metrics(start=4.8))])
    honest = _metrics(start=3.14)
    assert "a probe opened before" in clock.early_start(honest, slow_once)
    twice = clock.timing_of(
        NoisePolicy(start_sd_s=0.1), [_record(_metrics(start=4.8)), _record(_metrics(start=3.2))]
    )
    assert twice.start_sd_s == 0.1  # two runs' spread is no yardstick: the Doctor's
    assert twice.start_range_s == (pytest.approx(3.2), pytest.approx(4.8))
    assert clock.start_reasons(honest, twice) == []
    probe_at_import = _metrics(start=1.0)
    assert "1.00 s after launch, the reference's 3.20-4.80 s over 2 runs" in " ".join(
        clock.start_reasons(probe_at_import, twice)
    )


def test_apply_compares_the_slower_of_the_charged_step_and_the_lines():
    record = _record
    ref = record(_metrics())
    # every record held to the end: the run takes as long, its lines say its steps were free
    burst = record(_metrics(seen=[0.5] + [0.00002] * 9, tail=1.9, saved=4.6), [PATCH])
    assert burst.metrics.harness_step_time_s == pytest.approx(0.00002)
    assert harness_time(burst, ref) == pytest.approx(0.1)
    set_up_saving = record(_metrics(opened=2.6), [PATCH])  # 0.6 s less set-up, steps as slow
    assert harness_time(set_up_saving, ref) == pytest.approx(0.1)  # its lines: no gain
    faster = record(_metrics(step_s=0.08), [PATCH])
    assert harness_time(faster, ref) == pytest.approx(0.1 - 0.18 / 10)  # 9 steps 20 ms faster
    assert harness_time(faster, None) is None


def test_arrivals_the_harness_clock_contradicts_are_named():
    ref = Timing.of([_record(_metrics()), _record(_metrics())])
    assert ref.steps == 10 and ref.step_s == pytest.approx(0.1) and ref.e2e_sd_s == 0
    held = _metrics(seen=[0.5] + [0.00002] * 9, tail=1.9)  # claims 0.8 s, saves nothing
    reasons = clock.moved_work(held, ref)
    assert clock.unshown_saving(held, ref) is None  # 0.8 s is inside start-up's slack
    assert reasons == []
    long = _metrics(steps=60, seen=[0.5] + [0.00002] * 59, tail=6.9)  # claims 5.8 s
    long_ref = Timing.of([_record(_metrics(steps=60))])
    assert "the steps claim 6.00 s saved over 60 steps" in clock.unshown_saving(long, long_ref)
    early = _metrics(start=1.5)
    assert "a probe opened before the workload's own start" in clock.early_start(early, ref)
    assert clock.early_start(_metrics(start=2.5), ref) is None
    rehearsed = _metrics(steps=60, first=6.0, step_s=0.002)
    assert "inside a warm-up step" in clock.grown_warmup(rehearsed, long_ref)
    assert clock.grown_warmup(_metrics(steps=60, first=0.6), long_ref) is None
    assert clock.moved_work(rehearsed, long_ref, one_time=False) == []  # its start line is fine


def _record(m: TrialMetrics, patches=()) -> TrialRecord:
    return TrialRecord.model_validate(
        {
            "trial_id": "r",
            "workload": "w",
            "scale": "tiny",
            "status": "ok",
            "knobs": {},
            "patches": [p.model_dump() for p in patches],
            "locked_files": {},
            "mem_cap_bytes": None,
            "timeout_s": 60,
            "started_unix_s": 0,
            "cost_s": 1,
            "metrics": m.model_dump(),
        }
    )


def test_the_doctor_times_a_patch_over_enough_steps_within_a_cost_bound():
    # 0.2 s of window spread, 15 ms steps: sqrt(2) * 0.2 / (0.05 * 0.015) = 378 steps
    assert noise.timed_steps(48, 0.015, 5.0, 0.2) == 378
    assert noise.timed_steps(48, 0.015, 2.0, 0.2) == 200  # at most 1.5 x launch to exit of steps
    assert noise.timed_steps(500, 0.015, 5.0, 0.2) == 500  # never fewer than the contract's
    assert noise.timed_steps(48, 0.0, 5.0, 0.2) == 48
    assert noise.timed_cv(378, 0.015, 0.2, 0.0) == pytest.approx(0.05, rel=0.01)
    assert noise.timed_cv(378, 0.015, 0.2, 0.03) > 0.05
    assert noise.e2e_sd_floor(0.01, 2.0) == pytest.approx(0.06)  # 3% of the time outside


def test_a_charge_within_the_watchs_resolution_of_nothing_is_not_a_refusal_and_credits_no_gain():
    """Seven 3 ms steps: the smoke baseline's window 1.051 s, an honest patch's 1.027 s (the
    reads 19 and 15 ms apart) — charged -0.4 ms a step, which the watch's reads alone can make.
    Not impossible, and no gain credited; the same shortfall over steps the watch can resolve
    (or a window that lost a second) is still a refusal."""
    honest = clock.Charged(
        1.027, 1.051, "x", -0.0004, 7, lines_s=0.0029, room_s=1.0, ref_step_s=0.0031,
        resolution_s=clock.resolution_s(0.015, 0.019),
    )  # fmt: skip
    assert honest.impossible is None and honest.unresolved
    assert honest.compared_s == 0.0031  # the reference's step: no gain
    assert clock.resolution_s(None, 0.001) == 4 * POLL_S  # never finer than the reader's poll
    lost = clock.Charged(
        0.2, 1.2, "x", -0.14, 7, lines_s=0.0029, room_s=1.0, ref_step_s=0.0031,
        resolution_s=clock.resolution_s(0.015, 0.019),
    )  # fmt: skip
    assert "the window did not contain the run" in lost.impossible
    resolved = clock.Charged(2.0, 2.5, "x", 0.05, 90, lines_s=0.05, room_s=1.0, ref_step_s=0.055)
    assert not resolved.unresolved and resolved.compared_s == 0.05


def test_a_smokes_few_short_steps_below_zero_by_the_windows_noise_credit_no_gain():
    """Six 3 ms steps (18 ms together): an honest smoke's window 1.01 s against its baseline's
    1.14 s on a loaded host, where launch to exit moves by 0.05 s between identical runs —
    charged -0.019 s a step, all six steps 0.11 s below zero, which the set-up's spread inside
    two windows alone can make. Not impossible, and no gain credited; a window that lost a
    second (beyond that spread) is still a refusal, and so is the same shortfall where the
    runs' spread is unknown (no timing)."""
    ref = _record(_metrics(steps=6, step_s=0.003, first=0.003, start=1.0, tail=0.1, opened=0.2))
    timing = clock.timing_of(NoisePolicy(e2e_sd_s=0.05), [ref])
    m = ref.metrics
    assert timing is not None and m is not None
    honest = clock._charge(m, 1.01, 1.14, "x", 0.003, timing)
    assert honest.step_s == pytest.approx(0.003 - 0.13 / 6)
    assert honest.noise_s == pytest.approx(clock.NEGATIVE_SLACK_SD * 2**0.5 * 0.05)
    assert honest.impossible is None and honest.unresolved
    assert honest.compared_s == pytest.approx(0.003)  # the reference's step: no gain
    lost = clock._charge(m, 0.14, 1.14, "x", 0.003, timing)
    assert "the window did not contain the run" in (lost.impossible or "")
    untimed = clock._charge(m, 1.01, 1.14, "x", 0.003, None)
    assert "the window did not contain the run" in (untimed.impossible or "")
