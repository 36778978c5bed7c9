"""The store: a versioned schema, trials written running then final, interrupted ones found."""

import pytest
from sqlalchemy import inspect

from infrarsi.store import Store, StoredRun, revision, sqlite_url


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


def test_a_new_store_is_at_the_newest_revision(tmp_path):
    store = Store(sqlite_url(tmp_path))
    assert revision(store.engine) == "0002"
    assert {"runs", "trials"} <= set(inspect(store.engine).get_table_names())
    Store(sqlite_url(tmp_path))  # opening again upgrades nothing and loses nothing


def test_a_store_of_the_first_revision_is_upgraded_and_keeps_its_runs(tmp_path):
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
    assert revision(engine) == "0001"
    store = Store(sqlite_url(tmp_path))
    assert revision(store.engine) == "0002"
    assert store.run("old").ranking_json is None
    store.set_ranking("old", [{"knobs": {"a": 1}, "patches": [], "step_time_s": 0.1}])
    assert store.run("old").ranking_json[0]["knobs"] == {"a": 1}


def test_trials_are_running_then_final_and_survive_reopening(tmp_path):
    store = Store(sqlite_url(tmp_path))
    make_run(store)
    done = store.start_trial(
        "r1",
        0,
        {"knobs": {"a": 1}, "patches": []},
        {"step_time_s": 0.5, "p_oom": 0.1, "peak_bytes": 1e8},
    )
    store.finish_trial(done, "ok", trial_id="t0", step_time_s=0.4, peak_mem_bytes=9e7, cost_s=5)
    store.start_trial("r1", 1, {"knobs": {"a": 2}, "patches": []})
    again = Store(sqlite_url(tmp_path))
    trials = again.trials("r1")
    assert [t.status for t in trials] == ["ok", "running"]
    assert trials[0].predicted_p_oom == 0.1 and trials[0].step_time_s == 0.4
    interrupted = again.interrupt_running("r1")
    assert [t.seq for t in interrupted] == [1]
    assert [t.status for t in again.trials("r1")] == ["ok", "interrupted"]


def test_errors_name_what_is_known(tmp_path):
    store = Store(sqlite_url(tmp_path))
    make_run(store)
    with pytest.raises(KeyError, match="r1"):
        store.run("nope")
    row = store.start_trial("r1", 0, {})
    with pytest.raises(ValueError, match="running"):
        store.finish_trial(row, "running")
