"""A trial's record is frozen: what it says is known when it is built, and a changed copy
(a record that travelled from a cluster node, say) is a new record."""

import pydantic
import pytest

from infrarsi.trial.record import TrialRecord, TrialStatus


def _record(**fields) -> TrialRecord:
    return TrialRecord(
        trial_id="t-1",
        workload="toy",
        scale="tiny",
        status=TrialStatus.OK,
        knobs={"micro_batch": 2},
        patches=[],
        locked_files={},
        mem_cap_bytes=None,
        timeout_s=60.0,
        started_unix_s=0.0,
        cost_s=1.0,
        **fields,
    )


def test_a_record_refuses_a_change_after_it_is_built():
    record = _record(trial_dir="/runs/a/t-1")
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        record.node = "elsewhere"
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        record.status = TrialStatus.CRASH


def test_a_moved_record_is_a_new_record_and_the_old_one_is_unchanged():
    record = _record(trial_dir="/node/work/t-1")
    moved = record.moved("/node/work", "/here/trials")
    assert moved.trial_dir == "/here/trials/t-1" and record.trial_dir == "/node/work/t-1"
    assert TrialRecord.from_json(moved.model_dump_json()) == moved
