"""The run store's conformance suite, run on a SQLite file, in memory and on PostgreSQL: a
versioned schema, search trials written running then final, interrupted ones found, the
Doctor's and Apply's trials beside them, and one typed record read back as it was written."""

import pytest
from sqlalchemy import inspect

from infrarsi.records import RankedConfig
from infrarsi.records.trial import TrialRecord, TrialStatus
from infrarsi.stages import Stage
from infrarsi.store import Prediction, RunStatus, Store, StoredRun, revision, sqlite_url

NEWEST = "0005"


def make_run(store, run_id="r1"):
    return store.create_run(
        StoredRun(
            run_id=run_id,
            created_unix_s=1.0,
            workload="toy",
            scale="tiny",
            contract_hash="abc",
            contract_json={"workload": "toy"},
            searcher="random",
            seed=0,
            budget_trials=3,
            budget_s=None,
            capacity_bytes=10**9,
            status="running",
        )
    )


def record(trial_id: str, status: str = "ok", knobs: dict | None = None) -> TrialRecord:
    return TrialRecord(
        trial_id=trial_id,
        workload="toy",
        scale="tiny",
        status=status,
        knobs=knobs or {"a": 1},
        patches=[],
        locked_files={},
        mem_cap_bytes=10**9,
        timeout_s=60.0,
        started_unix_s=100.0,
        cost_s=5.0,
        error=None if status == "ok" else "killed",
    )


def test_a_new_store_is_at_the_newest_revision(store_url):
    store = Store(store_url)
    assert revision(store.engine) == NEWEST
    assert {"runs", "trials"} <= set(inspect(store.engine).get_table_names())
    Store(store_url)  # opening again upgrades nothing and loses nothing


def test_a_store_of_the_first_revision_is_upgraded_and_keeps_its_runs_and_trials(tmp_path):
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine, text

    from infrarsi.store import MIGRATIONS

    engine = create_engine(sqlite_url(tmp_path))
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")
        connection.execute(
            text(
                "INSERT INTO runs (run_id, created_unix_s, workload, scale, contract_hash, "
                "contract_json, searcher, seed, status) VALUES ('old', 1, 'toy', 'tiny', 'abc', "
                "'{}', 'random', 0, 'finished')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO trials (run_id, seq, config_json, status, started_unix_s, "
                "predicted_step_time_s) "
                "VALUES ('old', 0, '{\"knobs\": {}, \"patches\": []}', 'crash', 1, 0.25)"
            )
        )
    assert revision(engine) == "0001"
    store = Store(sqlite_url(tmp_path))
    assert revision(store.engine) == NEWEST
    assert store.run("old").ranking_json is None
    store.set_ranking("old", [RankedConfig(knobs={"a": 1}, patches=[], step_time_s=0.1)])
    assert store.run("old").ranking[0].knobs == {"a": 1}
    (old,) = store.trials("old")  # a trial written before stages were stored: the search's
    assert old.stage is Stage.RUN and old.status is TrialStatus.CRASH and old.record is None
    # the prediction kept under the column's later name (0005: what the search ranks by)
    assert old.predicted_ranked_time_per_step_s == 0.25


def test_trials_are_running_then_final_and_survive_reopening(store_url):
    store = Store(store_url)
    make_run(store)
    done = store.start_trial(
        "r1",
        0,
        {"knobs": {"a": 1}, "patches": []},
        Prediction(ranked_time_per_step_s=0.5, p_oom=0.1, peak_bytes=1e8),
    )
    store.finish_trial(
        done, TrialStatus.OK, trial_id="t0", step_time_s=0.4, cost_s=5, record=record("t0")
    )
    store.start_trial("r1", 1, {"knobs": {"a": 2}, "patches": []})
    again = store if store_url == "sqlite://" else Store(store_url)
    trials = again.trials("r1")
    assert [t.status for t in trials] == [TrialStatus.OK, TrialStatus.RUNNING]
    assert trials[0].predicted.p_oom == 0.1 and trials[0].step_time_s == 0.4
    assert trials[0].record == record("t0") and trials[1].record is None
    requeued = again.interrupt_running("r1")  # the driver died while trial 1 ran
    assert [t.seq for t in requeued] == [2] and requeued[0].config_json == {
        "knobs": {"a": 2},
        "patches": [],
    }
    lost = again.trials("r1")[1]  # the attempt stays, not charged, under an id of its own
    assert lost.status is TrialStatus.INTERRUPTED and lost.error.startswith("driver lost")
    assert lost.trial_id == "driver-lost-r1-1" and "proposed again as trial 2" in lost.error
    assert not TrialStatus.INTERRUPTED.is_finished()  # so the budget does not count it
    again.restart_trial(requeued[0].id)
    assert [t.status for t in again.trials("r1")] == [
        TrialStatus.OK,
        TrialStatus.INTERRUPTED,
        TrialStatus.RUNNING,
    ]


def test_every_stages_trials_are_stored_once_with_their_stage_and_label(store_url):
    store = Store(store_url)
    make_run(store)
    row = store.start_trial("r1", 0, {"knobs": {"a": 2}, "patches": []})
    store.finish_trial(row, TrialStatus.OOM, trial_id="s0", record=record("s0", "oom"))
    verdict = {"config": [{"a": 1}, []], "measurement": {"round": 0, "valid": None}}
    store.add_trial("r1", Stage.APPLY, record("a0"), label="baseline round 0", verdict=verdict)
    store.add_trial("r1", Stage.DOCTOR, record("d0"), label="baseline run 1")
    store.add_trial("r1", Stage.DOCTOR, record("d0"), label="baseline run 1")  # once only
    store.add_trial("r1", Stage.DOCTOR, record("d1", "crash"), label="calibration bf16")
    every = store.trials("r1", stage=None)
    assert [(t.stage, t.trial_id) for t in every] == [
        (Stage.DOCTOR, "d0"),
        (Stage.DOCTOR, "d1"),
        (Stage.RUN, "s0"),
        (Stage.APPLY, "a0"),
    ]
    assert [t.trial_id for t in store.trials("r1")] == ["s0"]  # the search's by default
    [applied] = store.trials("r1", Stage.APPLY)
    assert applied.verdict == verdict and applied.record == record("a0")  # Apply's journal
    assert all(t.verdict is None for t in every if t.stage is not Stage.APPLY)
    doctor = store.trials("r1", Stage.DOCTOR)
    assert [t.label for t in doctor] == ["baseline run 1", "calibration bf16"]
    assert doctor[1].status is TrialStatus.CRASH and doctor[1].error == "killed"
    assert doctor[1].record == record("d1", "crash")
    assert store.interrupt_running("r1") == []  # no stage's finished trial is touched


def test_a_run_opened_before_its_doctor_is_brought_to_its_search_keeping_its_trials(store_url):
    store = Store(store_url)
    opened = make_run(store).model_copy(update={"status": RunStatus.DOCTORING})
    store.save_run(opened)  # a run the store holds: written over, not inserted twice
    store.add_trial("r1", Stage.DOCTOR, record("d0"), label="baseline run 1")
    sealed = opened.model_copy(
        update={
            "contract_hash": "sealed",
            "searcher": "infrarsi",
            "budget_trials": 8,
            "status": RunStatus.RUNNING,
            "created_unix_s": 99.0,
        }
    )
    assert store.save_run(sealed).contract_hash == "sealed"
    [run] = store.runs()
    assert (run.status, run.searcher, run.budget_trials) == (RunStatus.RUNNING, "infrarsi", 8)
    assert run.created_unix_s == 1.0  # when it was opened
    assert [t.trial_id for t in store.trials("r1", Stage.DOCTOR)] == ["d0"]
    assert store.save_run(sealed.model_copy(update={"run_id": "r2"})).run_id == "r2"  # new


def test_errors_name_what_is_known(store_url):
    store = Store(store_url)
    make_run(store)
    with pytest.raises(KeyError, match="r1"):
        store.run("nope")
    row = store.start_trial("r1", 0, {})
    with pytest.raises(ValueError, match="running"):
        store.finish_trial(row, TrialStatus.RUNNING)
    with pytest.raises(ValueError, match="finished status"):
        record("x", "interrupted")
