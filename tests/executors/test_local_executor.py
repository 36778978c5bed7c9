"""The local executor's submit / poll / wait / cancel on real trials of the toy workload: one
timed trial at a time, a queued trial cancelled before it starts never runs, a started one is
not cancelled."""

from pathlib import Path

import pytest

from infrarsi.executors import LocalExecutor, TrialCancelled, TrialRequest
from infrarsi.trial import TrialStatus

TOY = Path(__file__).resolve().parents[1] / "fixtures" / "toy" / "workload.yaml"


def _request() -> TrialRequest:
    return TrialRequest(workload=str(TOY), scale="tiny", knobs={}, evaluate=False)


def test_a_trial_cancelled_before_it_starts_never_runs_and_says_so(tmp_path):
    executor = LocalExecutor(tmp_path)
    with executor._lock:  # a timed trial holds the executor: the next one waits in its queue
        handle = executor.submit(_request())
        assert executor.cancel(handle)
    with pytest.raises(TrialCancelled, match="cancelled before it started"):
        executor.wait(handle)
    assert not list((tmp_path / "trials").glob("*"))  # nothing ran


def test_a_submitted_trial_ends_with_its_record_and_cannot_be_cancelled_once_started(tmp_path):
    executor = LocalExecutor(tmp_path)
    handle = executor.submit(_request())
    record = executor.wait(handle)
    assert record.status is TrialStatus.OK and Path(record.trial_dir).is_dir()
    assert executor.poll(handle) == record
    assert not executor.cancel(handle)
