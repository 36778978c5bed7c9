"""An ``optimize`` on dense-1node at tiny whose bank holds an earlier round of the same job
(the session's shared optimize, ``conftest.dense_optimized``; its bank: ``seeded_bank.py``):
it starts from what the bank holds — its seeds are the ones the bank's experiences call for,
the one it expects most of is tried, and its report says where each came from and whether it
held here.

The earlier round is a recorded one (``tests/fixtures/ledgers/dense-1node-no-gain``), so this
test needs one real ``optimize``, not two: it once ran a first optimize to fill the bank, which
the recorded round's real experiences now stand for (the ingest of a round's ledger into the
bank is replayed on it by ``tests/report/test_recorded_ledgers.py``). Whether that round
measured something faster than its baseline, the test never depends on; beside its experiences
the bank holds one of an earlier run that gained 4x on one of its configs (as a bank import
would bring it): a claim above the catalog's for its pick, so the run tries it right after its
baseline; what the earlier round found faster, if anything, must be among the seeds too (tried,
or reported "not measured" where the budget or the guard passed it over)."""

import json
from pathlib import Path

import pytest
from conftest import cli_json
from seeded_bank import EARLIER


@pytest.mark.slow
def test_an_optimize_starts_from_what_the_bank_holds(dense_optimized):
    """In CI the bank is a PostgreSQL server whose URL carries a password (the test server
    trusts any): the run's screen, its report, its bank advice and its ledgers never hold it,
    and the bank is still named (``infrarsi:***@``)."""
    answer, out, seeded = dense_optimized.answer, dense_optimized.out, dense_optimized.bank
    first = seeded.first_run_id
    run_dir = Path(answer["rounds"][0]["run_dir"])
    advice = json.loads((run_dir / "bank_advice.json").read_text())
    assert advice["experiences"] == seeded.experiences + 1 and advice["used"] > 0
    seeded_configs = {tuple(_key(s)): s for s in advice["seeds"]}
    assert seeded.earlier_key in seeded_configs, "the earlier run's 4x config is a seed"
    assert EARLIER in {s["run_id"] for s in seeded_configs[seeded.earlier_key]["sources"]}
    for seed in advice["seeds"]:
        assert {s["run_id"] for s in seed["sources"]} <= {first, EARLIER}
    if seeded.gained_first:  # the earlier round measured a gain here: the bank passes it on
        assert any(first in {s["run_id"] for s in seed["sources"]} for seed in advice["seeds"])
    given = answer["rounds"][0]["bank_seeds"]
    assert len(given) == len(advice["seeds"])
    (earlier,) = [s for s in given if _key(s) == seeded.earlier_key]
    assert earlier["held"] in (True, False), "the 4x seed was measured here"
    report = (run_dir / "report.md").read_text()
    section = report.split("## Experience bank", 1)[1].split("## ", 1)[0]
    assert EARLIER in section
    rows = [
        line
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| seed |")
    ]
    assert len(rows) == len(given)
    assert all(row.endswith(("| held |", "| did not hold |", "| not measured |")) for row in rows)
    assert any(row.endswith(("| held |", "| did not hold |")) for row in rows)
    stats = cli_json("bank", "stats", "--bank", seeded.url)
    assert stats["runs"] == 3 and stats["seeds_given"] == len(given)
    # what the run measured went in: its Doctor's, its search's and Apply's trials
    before = seeded.by_stage
    assert stats["by_stage"]["run"] == before["run"] + answer["trials"]
    assert stats["by_stage"]["doctor"] > before["doctor"] and stats["by_stage"]["apply"] > 1
    if seeded.secret is None:
        pytest.skip("the bank is a SQLite file here (no PostgreSQL server): no password to keep")
    _said_nowhere(seeded.secret, out)


def _key(seed: dict) -> tuple:
    from infrarsi.identity import config_key

    return config_key(seed["knobs"], seed["patches"])


def _said_nowhere(secret: str, out: Path) -> None:
    """``secret`` in no file a run left under ``out`` (its screen kept there too), while the
    bank is still named on the screen, its password masked."""
    screen = (out / "optimize.stdout").read_text() + (out / "optimize.stderr").read_text()
    assert "infrarsi:***@" in screen
    written = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "report.md" for p in written)
    assert [p for p in written if secret.encode() in p.read_bytes()] == []
