"""Every rule that sorts a finished trial into one status, decided on recorded evidence (exit
codes, the kernel's OOM count, the ranks' error records, the logs), without running a trial."""

import json

import pytest

from infrarsi.sandbox.memcg import RankMemory
from infrarsi.sandbox.process import ProcessResult
from infrarsi.trial import TrialStatus, prepare
from infrarsi.trial.classify import outcome


@pytest.fixture
def spec(toy):
    return prepare(toy, "tiny", {}, mem_cap_bytes=256 << 20)


def _result(code=0, timed_out=False):
    return ProcessResult(returncode=code, timed_out=timed_out, wall_s=3.0)


def _write(folder, name, text):
    (folder / name).write_text(text)


def test_an_oom_kill_by_the_kernel_is_an_oom_with_the_capacity(tmp_path, spec):
    memory = {0: RankMemory(peak_bytes=256 << 20, oom_kills=1), 1: RankMemory(10, 0)}
    got = outcome(_result(-9), tmp_path, spec, memory)
    assert got.status is TrialStatus.OOM and "capacity 268435456 bytes" in got.error


def test_an_oom_kill_wins_over_a_timeout(tmp_path, spec):
    memory = {0: RankMemory(peak_bytes=256 << 20, oom_kills=1)}
    assert outcome(_result(None, timed_out=True), tmp_path, spec, memory).status is TrialStatus.OOM


def test_an_allocation_error_a_rank_raised_is_an_oom_even_at_import(tmp_path, spec):
    _write(
        tmp_path,
        "error.rank1.jsonl",
        json.dumps(
            {
                "rank": 1,
                "type": "OutOfMemoryError",
                "message": "can't allocate",
                "oom": True,
                "traceback": "...",
            }
        )
        + "\n",
    )
    got = outcome(_result(1), tmp_path, spec)
    assert got.status is TrialStatus.OOM and got.error.startswith("rank 1: OutOfMemoryError")


def test_an_allocator_message_in_the_logs_counts_only_when_the_job_failed(tmp_path, spec):
    _write(tmp_path, "stderr.log", "RuntimeError: DefaultCPUAllocator: can't allocate memory\n")
    assert outcome(_result(1), tmp_path, spec).status is TrialStatus.OOM
    assert outcome(_result(0), tmp_path, spec).status is TrialStatus.OK


def test_a_timeout_is_a_timeout(tmp_path, spec):
    got = outcome(_result(None, timed_out=True), tmp_path, spec)
    assert got.status is TrialStatus.TIMEOUT and "killed" in got.error


def test_a_failure_after_every_step_was_reported_is_ok_with_a_warning(tmp_path, spec):
    for rank in range(2):
        _write(
            tmp_path,
            f"metrics.rank{rank}.jsonl",
            "\n".join(
                json.dumps(e)
                for e in [
                    {"kind": "start", "rank": rank, "world_size": 2},
                    {"kind": "step", "step": 0, "step_time_s": 0.1, "loss": 1.0},
                    {"kind": "end", "peak_mem_bytes": 1},
                ]
            )
            + "\n",
        )
    _write(tmp_path, "stderr.log", "terminate called without an active exception\n")
    got = outcome(_result(-6), tmp_path, spec)
    assert got.status is TrialStatus.OK and "gloo teardown race" in got.warnings[0]


def test_any_other_failure_is_a_crash_with_the_rank_traceback(tmp_path, spec):
    _write(
        tmp_path,
        "error.rank0.jsonl",
        json.dumps(
            {
                "rank": 0,
                "type": "ValueError",
                "message": "bad",
                "oom": False,
                "traceback": "Traceback ... ValueError: bad",
            }
        )
        + "\n",
    )
    got = outcome(_result(1), tmp_path, spec)
    assert got.status is TrialStatus.CRASH and "ValueError: bad" in got.error
    plain = tmp_path / "plain"
    plain.mkdir()
    _write(plain, "stdout.log", "something went wrong\n")
    got = outcome(_result(2), plain, spec)
    assert got.status is TrialStatus.CRASH and "exit code 2" in got.error


def test_a_step_the_busy_reader_timed_shorter_than_it_ran_is_timed_as_reported():
    """Lines a starved reader took together (0.1 ms apart for 2 ms steps) never make a step
    shorter than the rank said it was; a step the harness saw longer keeps the harness's."""
    from infrarsi.trial.classify import never_below

    seen = [None, 0.0001, 0.0021, 0.0001, 0.0300]
    reported = [0.12, 0.0020, 0.0020, 0.0020, 0.0020]
    assert never_below(seen, reported) == [None, 0.0020, 0.0021, 0.0020, 0.0300]
    assert never_below(seen, reported[:2]) == seen  # not one time per step: as seen


def test_a_ratio_bound_no_measurement_made_is_shown_past_its_limit():
    from infrarsi.apply.decide import Choice, Interval, promote
    from infrarsi.units import format_ratio_bound

    assert [format_ratio_bound(v) for v in (None, 0.0001, 0.5, 99.0, 2.1e11)] == [
        "-", "<0.01", "0.500", "99.000", ">100",
    ]  # fmt: skip
    _, said = promote([Choice("c3", Interval(0.24, 1e-9, 2.1e11, 2), True)])
    assert "c3 0.240x [<0.01, >100] over 2 rounds" in said


def test_steps_the_reader_took_together_are_said():
    from types import SimpleNamespace

    from infrarsi.trial.classify import lagged

    m = SimpleNamespace(
        harness_step_times_s=[None, 0.0001, 0.0021, 0.0001], step_times_s=[0.1, 0.002, 0.002, 0.002]
    )
    m.steps = 4
    (said,) = lagged(m)
    assert said.startswith("2 of 4 steps' lines reached the harness together")
    m.harness_step_times_s = [None, 0.002, 0.0021, 0.0019]
    assert lagged(m) == []
