"""The audit trail is an export of the run's store written as each trial ends: a trial of the
Doctor or of Apply added, a search trial finished — one line each, once, never rewritten (an
Apply trial's line carries the verdict it was stored with) — and a run whose file lacks stored
trials has their lines appended once."""

import json
import sys
from pathlib import Path

from infrarsi.audit import AuditLog
from infrarsi.records import AUDIT_FILE, Measurement, Prediction
from infrarsi.records.trial import TrialStatus
from infrarsi.stages import Stage
from infrarsi.store import Store, sqlite_url

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


def test_an_apply_trials_line_carries_the_verdict_it_was_stored_with(tmp_path):
    store = Store(sqlite_url(tmp_path))
    make_run(store)
    store.subscribe(AuditLog(tmp_path, "e2e_time", "random").on_trial_end)
    measurement = Measurement(
        round=1,
        label="c1",
        trial_id="a1",
        status=TrialStatus.OK,
        compared_s=2.5,
        cost_s=5.0,
        valid=False,
        reasons=["loss differs"],
        flags=["loss"],
    )
    verdict = {"config": [{"a": 1}, []], "measurement": measurement.model_dump(mode="json")}
    store.add_trial("r1", Stage.APPLY, record("a1"), label="c1 round 1", verdict=verdict)
    store.add_trial("r1", Stage.APPLY, record("a2"), label="reference", verdict={"reference": "k"})
    first, reference = _lines(tmp_path)
    assert (first["round"], first["label"], first["compared_s"]) == (1, "c1", 2.5)
    assert first["valid"] is False and first["reasons"] == ["loss differs"]
    assert first["flags"] == ["loss"]
    assert "valid" not in reference and reference["label"] == "reference"


def test_catching_up_appends_the_stored_trials_the_file_lacks_once(tmp_path):
    store = Store(sqlite_url(tmp_path))
    make_run(store)
    store.add_trial("r1", Stage.DOCTOR, record("d1"), label="baseline run 1/3")
    row = store.start_trial("r1", 0, {"knobs": {"a": 2}, "patches": []}, Prediction())
    store.finish_trial(row, TrialStatus.OK, trial_id="s1", record=record("s1", "ok", {"a": 2}))
    store.start_trial("r1", 1, {"knobs": {"a": 3}, "patches": []}, Prediction())  # in flight
    log = AuditLog(tmp_path, "e2e_time", "random")
    (tmp_path / AUDIT_FILE).write_text(
        json.dumps({"stage": "doctor", "seq": 0, "trial_id": "d1"}) + "\n"
    )
    assert log.catch_up(store.trials("r1")) == 1
    assert [(x["stage"], x["trial_id"]) for x in _lines(tmp_path)] == [
        ("doctor", "d1"),
        ("run", "s1"),
    ]
    assert log.catch_up(store.trials("r1")) == 0 and len(_lines(tmp_path)) == 2
