"""Two ``optimize`` runs on dense-1node at tiny sharing one bank: the second starts from what
the bank holds — its seeds are the ones the bank's experiences call for, the one it expects
most of is tried, and its report says where each came from and whether it held here.

Whether the first run measured something faster than its baseline is a timing on a noisy
two-core machine; the test never depends on it. Beside the first run's experiences the bank gets
one of an earlier run on this host that gained 4x (one of the first run's own configs, as a
bank import would bring it): a claim above the catalog's for its pick, so the second run tries
it right after its baseline; what the first run found faster, if anything, must be among the
seeds too (tried, or reported "not measured" where the budget or the guard passed it over)."""

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import OPTIMIZE_INSTRUCTION as INSTRUCTION
from conftest import cli_json, optimize_json

from infrarsi.bank.transfer import SEED_MIN_SPEEDUP
from infrarsi.identity import config_key
from infrarsi.store.bank import BankStore

EARLIER = "earlier-run-on-this-host"
SECRET = "pw-7f3c-never-written"  # the second run's bank's password


def _key(e) -> tuple:
    return config_key(e.knobs_json, [p["id"] for p in e.patches_json])


def _add_an_earlier_gain(bank: str, first_run_id: str, baseline: dict) -> tuple:
    """Store, as an earlier run's, a copy of one of the first run's search trials that ran
    (not its baseline) with a 4x speed-up; returns that config's key. The bank's expected
    speed-up for the config pools this claim with the first run's own measurements of it,
    so the claim is large enough to stay above the priors' pick whatever a loaded machine
    measured there (a 2x claim pooled with two measurements at ~1.03x expected 1.29x and came
    after the pick and the Doctor's two seeds, past a budget of 3), and the trial is one on
    the baseline's knobs where the first run has one (a patch: a seed this host's Doctor
    measured slow, bf16 where it is emulated, is no start point), the one measured fewest
    times."""
    store = BankStore(bank)
    base = config_key(baseline, [])
    mine = [
        e for e in store.experiences() if e.run_id == first_run_id and e.stage in ("run", "apply")
    ]
    times = Counter(_key(e) for e in mine)
    ran = [e for e in mine if e.stage == "run" and e.status == "ok" and _key(e) != base]
    patches_only = [e for e in ran if config_key(e.knobs_json, []) == base]
    trial = min(patches_only or ran, key=lambda e: times[_key(e)])
    earlier = trial.model_copy(
        update={"id": None, "run_id": EARLIER, "speedup": 4.0, "key": f"{EARLIER}/run/{trial.key}"}
    )
    assert store.add([earlier]) == 1
    return _key(trial)


def _first_runs_gains(bank: str, first_run_id: str, baseline: dict) -> set:
    base = config_key(baseline, [])
    return {
        _key(e)
        for e in BankStore(bank).experiences()
        if e.run_id == first_run_id
        and e.stage in ("run", "apply")
        and e.status == "ok"
        and not e.censored
        and (e.speedup or 0) >= SEED_MIN_SPEEDUP
    } - {base}


@pytest.mark.slow
def test_a_second_optimize_starts_from_what_the_bank_holds(dense_optimized, tmp_path, postgres_url):
    """The second run's bank is a PostgreSQL server whose URL carries a password (the test
    server trusts any): the run's screen, its report, its bank advice and its ledgers never
    hold it, and the bank is still named (``infrarsi:***@``)."""
    first, _, first_bank = dense_optimized  # the session's optimize, with a bank of its own
    bank = postgres_url.replace("://infrarsi@", f"://infrarsi:{SECRET}@")
    BankStore(f"sqlite:///{first_bank}").export(tmp_path / "first.json")
    BankStore(bank).import_file(tmp_path / "first.json")  # the shared run's bank stays as it was
    first_run = json.loads((Path(first["rounds"][0]["run_dir"]) / "run.json").read_text())
    stats = cli_json("bank", "stats", "--bank", bank)
    assert stats["runs"] == 1 and stats["by_stage"]["run"] == first["trials"]
    assert stats["by_stage"]["doctor"] >= 3 and "apply" in stats["by_stage"]
    baseline = json.loads((Path(first["rounds"][0]["run_dir"]) / "doctor.json").read_text())[
        "knobs"
    ]
    gained_first = _first_runs_gains(bank, first_run["run_id"], baseline)
    earlier_key = _add_an_earlier_gain(bank, first_run["run_id"], baseline)

    (tmp_path / "two").mkdir()
    second = optimize_json(
        Path("dense-1node"),
        INSTRUCTION,
        tmp_path / "two",
        "--budget",
        "3",
        "--top",
        "1",
        "--verify-rounds",
        "2",
        "--doctor-repeats",
        "2",
        "--bank",
        bank,
    )  # small: CI runs it on 2 cores
    run_dir = Path(second["rounds"][0]["run_dir"])
    advice = json.loads((run_dir / "bank_advice.json").read_text())
    assert advice["experiences"] == stats["experiences"] + 1 and advice["used"] > 0
    seeded = {config_key(s["knobs"], s["patches"]): s for s in advice["seeds"]}
    assert earlier_key in seeded, "the earlier run's 4x config is a seed"
    assert EARLIER in {s["run_id"] for s in seeded[earlier_key]["sources"]}
    for seed in advice["seeds"]:
        assert {s["run_id"] for s in seed["sources"]} <= {first_run["run_id"], EARLIER}
    if gained_first:  # the first run measured a gain here: the bank passes it on
        assert any(
            first_run["run_id"] in {s["run_id"] for s in seed["sources"]}
            for seed in advice["seeds"]
        )
    given = second["rounds"][0]["bank_seeds"]
    assert len(given) == len(advice["seeds"])
    (earlier,) = [s for s in given if config_key(s["knobs"], s["patches"]) == earlier_key]
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
    assert cli_json("bank", "stats", "--bank", bank)["runs"] == 3
    assert cli_json("bank", "stats", "--bank", bank)["seeds_given"] == len(given)
    _said_nowhere(SECRET, tmp_path / "two")


def _said_nowhere(secret: str, out: Path) -> None:
    """``secret`` in no file a run left under ``out`` (its screen kept there too), while the
    bank is still named on the screen, its password masked."""
    screen = (out / "optimize.stdout").read_text() + (out / "optimize.stderr").read_text()
    assert "infrarsi:***@" in screen
    written = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "report.md" for p in written)
    assert [p for p in written if secret.encode() in p.read_bytes()] == []
