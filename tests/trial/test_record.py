"""A trial's record is frozen: what it says is known when it is built, and a changed copy
(a record that travelled from a cluster node, say) is a new record."""

import sys
from pathlib import Path

import pydantic
import pytest

from infrarsi.records.trial import TrialRecord, TrialStatus

sys.path.insert(0, str(Path(__file__).parents[1] / "store"))
from test_store import record  # noqa: E402  (the store suite's record builder)


def _record(trial_dir: str) -> TrialRecord:
    return record("t-1").model_copy(update={"trial_dir": trial_dir})


def test_a_record_refuses_a_change_after_it_is_built():
    rec = _record("/runs/a/t-1")
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        rec.node = "elsewhere"
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        rec.status = TrialStatus.CRASH


def test_a_moved_record_is_a_new_record_and_the_old_one_is_unchanged():
    rec = _record("/node/work/t-1")
    moved = rec.moved("/node/work", "/here/trials")
    assert moved.trial_dir == "/here/trials/t-1" and rec.trial_dir == "/node/work/t-1"
    assert TrialRecord.from_json(moved.model_dump_json()) == moved
