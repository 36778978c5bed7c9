"""The audit trail is an export of the run's store written as each trial ends: a trial of the
Doctor or of Apply added, a search trial finished — one line each, once — and written whole
again (atomically) when Apply has judged its measurements."""

import json
import sys
from pathlib import Path

from infrarsi.audit import AUDIT_FILE, AuditLog, write_audit
from infrarsi.records import Prediction
from infrarsi.stages import Stage
from infrarsi.store import Store, sqlite_url
from infrarsi.trial.record import TrialStatus

sys.path.insert(0, str(Path(__file__).parent / "store"))
from test_store import make_run, record  # noqa: E402


def _lines(run_dir):
    return [json.loads(line) for line in (run_dir / AUDIT_FILE).read_text().splitlines()]


def test_each_trial_the_store_finishes_adds_its_audit_line_once(tmp_path):
    store = Store(sqlite_url(tmp_path))
    make_run(store)
    store.subscribe(AuditLog(tmp_path, "e2e_time", "random").on_trial_end)
    store.add_trial("r1", Stage.DOCTOR, record("d1"), label="baseline run 1/3")
    assert [(x["stage"], x["label"], x["trial_id"]) for x in _lines(tmp_path)] == [
        ("doctor", "baseline run 1/3", "d1")
    ]
    row = store.start_trial("r1", 0, {"knobs": {"a": 2}, "patches": []}, Prediction(p_oom=0.1))
    assert len(_lines(tmp_path)) == 1  # a trial in flight has no line yet
    store.finish_trial(row, TrialStatus.OOM, trial_id="s1", record=record("s1", "oom", {"a": 2}))
    store.add_trial("r1", Stage.DOCTOR, record("d1"), label="baseline run 1/3")  # known: no line
    store.add_trial("r1", Stage.APPLY, record("a1"), label="c1")
    lines = _lines(tmp_path)
    assert [(x["stage"], x["trial_id"], x["status"]) for x in lines] == [
        ("doctor", "d1", "ok"),
        ("run", "s1", "oom"),
        ("apply", "a1", "ok"),
    ]
    search = lines[1]
    assert search["seq"] == 0 and search["proposed_by"] == "random"
    assert search["predicted"]["p_oom"] == 0.1 and search["knobs"] == {"a": 2}


def test_the_whole_export_replaces_the_lines_written_as_trials_ended(tmp_path):
    (tmp_path / AUDIT_FILE).write_text('{"trial_id": "d1"}\n{"trial_id": "s1"}\n')
    write_audit(tmp_path / AUDIT_FILE, [{"trial_id": "d1", "valid": True}])
    assert _lines(tmp_path) == [{"trial_id": "d1", "valid": True}]
    assert not list(tmp_path.glob("*.tmp"))
