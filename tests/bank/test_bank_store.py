"""The bank's store, the same suite on SQLite and on a real PostgreSQL server: what goes in
comes back, a run ingested twice is stored once, concurrent writers lose nothing, a bank made
at the first schema revision upgrades, and a bank moves between hosts by export and import."""

import json
import multiprocessing
import sqlite3

import pytest
from helpers import experience
from sqlalchemy import create_engine, inspect, text

from infrarsi.store import bank as bank_store
from infrarsi.store.bank import BankError, BankStore, StoredSeed


def test_experiences_round_trip_and_a_run_ingested_twice_is_stored_once(bank_url):
    bank = BankStore(bank_url)
    rows = [
        experience("t1", {"nproc": 2, "precision": "bf16"}, 1.3, patches=["fused_adamw"]),
        experience(
            "t2", {"nproc": 1, "precision": "fp32"}, None, status="oom", censored=True, peak=4e8
        ),
        experience("t3", {"nproc": 2, "precision": "fp32"}, 1.0, stage="doctor"),
    ]
    texts = {"sfused_adamw": ("fused_adamw", "--- a/train.py\n+++ b/train.py\n")}
    assert bank.add(rows, texts) == 3
    assert bank.add(rows, texts) == 0  # the same keys again: nothing new
    back = bank.experiences()
    assert [e.key for e in back] == [e.key for e in rows]
    assert back[0].knobs_json == {"nproc": 2, "precision": "bf16"}
    assert back[0].patches_json == [{"id": "fused_adamw", "sha256": "sfused_adamw"}]
    assert back[1].censored is True and back[1].speedup is None and back[1].status == "oom"
    assert [e.key for e in bank.experiences(stage="doctor")] == ["run-1/doctor/t3"]
    assert bank.patch_text("sfused_adamw").startswith("--- a/train.py")
    assert len(bank.patch_texts()) == 1
    assert bank.experience(back[0].id).speedup == pytest.approx(1.3)
    with pytest.raises(KeyError, match="ids run"):
        bank.experience(10_000)


def test_seeds_record_where_they_came_from_and_whether_they_held(bank_url):
    bank = BankStore(bank_url)
    ids = bank.add_seeds(
        [
            StoredSeed(
                run_id="run-2",
                created_unix_s=1.0,
                knobs_json={"nproc": 2},
                patches_json=["sdpa_attention"],
                expected_speedup=1.4,
                similarity=0.8,
                source_json={"sources": [{"run_id": "run-1"}]},
            )
        ]
    )
    bank.set_seed_outcome(ids[0], 1.25, True)
    (seed,) = bank.seeds("run-2")
    assert seed.held is True and seed.measured_speedup == pytest.approx(1.25)
    assert seed.source_json["sources"][0]["run_id"] == "run-1"
    assert bank.seeds("run-9") == []


def test_forget_removes_one_run_only(bank_url):
    bank = BankStore(bank_url)
    bank.add(
        [experience(f"a{i}", {"i": i}, 1.0, run="run-a") for i in range(3)]
        + [experience(f"b{i}", {"i": i}, 1.0, run="run-b") for i in range(2)]
    )
    assert bank.forget_run("run-a") == 3
    assert {e.run_id for e in bank.experiences()} == {"run-b"}
    assert bank.forget_run("run-a") == 0


def test_a_bank_moves_to_another_host_by_export_and_import(bank_url, tmp_path):
    bank = BankStore(bank_url)
    bank.add(
        [experience(f"t{i}", {"micro_batch": i}, 1.0 + i / 10, patches=["p"]) for i in range(4)],
        {"sp": ("p", "patch text")},
    )
    bank.add_seeds(
        [
            StoredSeed(
                run_id="run-1",
                created_unix_s=1.0,
                knobs_json={"m": 1},
                patches_json=[],
                expected_speedup=1.1,
                similarity=1.0,
                source_json={},
            )
        ]
    )
    assert bank.export(tmp_path / "bank.json") == {"experiences": 4, "patch_texts": 1, "seeds": 1}
    other = BankStore(f"sqlite:///{tmp_path / 'other.sqlite'}")
    assert other.import_file(tmp_path / "bank.json") == {"experiences": 4, "skipped": 0, "seeds": 1}
    assert other.import_file(tmp_path / "bank.json") == {"experiences": 0, "skipped": 4, "seeds": 0}
    assert [e.knobs_json for e in other.experiences()] == [e.knobs_json for e in bank.experiences()]
    assert other.patch_text("sp") == "patch text"
    # a file exported before the times were renamed (format version 1) is read under the new names
    data = json.loads((tmp_path / "bank.json").read_text())
    assert data["version"] == bank_store.EXPORT_VERSION == 2
    data["version"] = 1
    for e in data["experiences"]:
        e["step_time_s"] = e.pop("ranked_time_per_step_s") or 0.25
        e["baseline_step_time_s"] = e.pop("baseline_ranked_time_per_step_s")
    (tmp_path / "old.json").write_text(json.dumps(data))
    older = BankStore(f"sqlite:///{tmp_path / 'older.sqlite'}")
    assert older.import_file(tmp_path / "old.json")["experiences"] == 4
    assert {e.ranked_time_per_step_s for e in older.experiences()} == {0.25}
    (tmp_path / "junk.json").write_text('{"experiences": []}')
    with pytest.raises(BankError, match="infrarsi bank export"):
        other.import_file(tmp_path / "junk.json")


def _writer(url: str, worker: int) -> None:
    bank = BankStore(url)
    for batch in range(10):  # 10 transactions of 5 own experiences and 1 every worker writes
        rows = [experience(f"w{worker}-{batch}-{i}", {"w": worker}, 1.0) for i in range(5)]
        rows.append(experience(f"shared-{batch}", {"w": -1}, 1.0))
        bank.add(rows)


def test_concurrent_writers_lose_nothing(bank_url):
    BankStore(bank_url)  # the schema exists before the writers race
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_writer, args=(bank_url, w)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(120)
        assert p.exitcode == 0
    keys = [e.key for e in BankStore(bank_url).experiences()]
    assert len(keys) == len(set(keys)) == 4 * 50 + 10


def test_a_bank_made_at_the_first_revision_upgrades_and_keeps_its_rows(bank_url):
    from alembic import command
    from alembic.config import Config

    engine = create_engine(bank_url)
    config = Config()
    config.set_main_option("script_location", str(bank_store.MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")
    assert bank_store.revision(engine) == "0001"
    assert "seeds" not in inspect(engine).get_table_names()
    made = experience("old", {"nproc": 1}, 1.2).model_copy(
        update={"ranked_time_per_step_s": 0.5, "baseline_ranked_time_per_step_s": 0.6}
    )
    old_names = {new: old for old, new in bank_store.EXPORT_RENAMED.items()}  # 0001's columns
    row = {old_names.get(k, k): v for k, v in made.model_dump(exclude={"id"}).items()}
    columns = ", ".join(row)
    with engine.begin() as connection:
        connection.execute(
            text(f"INSERT INTO experiences ({columns}) VALUES ({', '.join(':' + k for k in row)})"),
            {k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in row.items()},
        )
    bank = BankStore(bank_url)  # opening upgrades
    assert bank_store.revision(bank.engine) == "0003"
    assert "seeds" in inspect(bank.engine).get_table_names()
    (kept,) = bank.experiences()
    assert kept.key == "run-1/run/old" and kept.knobs_json == {"nproc": 1}
    # the times kept under their later names (0003: what the search ranked by)
    assert (kept.ranked_time_per_step_s, kept.baseline_ranked_time_per_step_s) == (0.5, 0.6)
    assert "alembic_version" not in inspect(bank.engine).get_table_names()  # its own table


def test_sqlite_bank_runs_in_wal_mode(tmp_path):
    path = tmp_path / "bank.sqlite"
    BankStore(str(path)).add([experience("t", {}, 1.0)])
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_bank_that_cannot_be_opened_says_how_to_give_one():
    with pytest.raises(BankError, match="--bank"):
        BankStore("nosuchdialect://x/y")
