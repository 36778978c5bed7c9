"""Two ``optimize`` runs on dense-1node at tiny sharing one bank: the second starts from what
the first measured — its seeds come from the first run, are tried, and its report says whether
they held here."""

import json
import shutil
from pathlib import Path

import pytest

from conftest import OPTIMIZE_INSTRUCTION as INSTRUCTION, cli_json, optimize_json


@pytest.mark.slow
def test_a_second_optimize_starts_from_what_the_first_put_in_the_bank(dense_optimized, tmp_path):
    first, _, first_bank = dense_optimized  # the session's optimize, with a bank of its own
    bank = str(tmp_path / "bank.sqlite")
    shutil.copyfile(first_bank, bank)  # the shared run's bank stays as that run left it
    first_run = json.loads((Path(first["rounds"][0]["run_dir"]) / "run.json").read_text())
    stats = cli_json("bank", "stats", "--bank", bank)
    assert stats["runs"] == 1 and stats["by_stage"]["run"] == first["trials"]
    assert stats["by_stage"]["doctor"] >= 3 and "apply" in stats["by_stage"]

    (tmp_path / "two").mkdir()
    second = optimize_json(Path("dense-1node"), INSTRUCTION, tmp_path / "two", "--budget", "3",
                           "--top", "1", "--verify-rounds", "2", "--doctor-repeats", "2",
                           "--bank", bank)  # small: CI runs it on 2 cores
    run_dir = Path(second["rounds"][0]["run_dir"])
    advice = json.loads((run_dir / "bank_advice.json").read_text())
    assert advice["experiences"] == stats["experiences"] and advice["used"] > 0
    assert advice["seeds"], "the first run measured something faster than its baseline"
    for seed in advice["seeds"]:
        assert {s["run_id"] for s in seed["sources"]} == {first_run["run_id"]}
    tried = second["rounds"][0]["bank_seeds"]
    assert len(tried) == len(advice["seeds"])
    assert all(s["held"] in (True, False) for s in tried), "every seed was measured here"
    report = (run_dir / "report.md").read_text()
    section = report.split("## Experience bank", 1)[1].split("## ", 1)[0]
    assert first_run["run_id"] in section
    rows = [line for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| seed |")]
    assert len(rows) == len(tried)
    assert all(row.endswith(("| held |", "| did not hold |")) for row in rows)
    assert cli_json("bank", "stats", "--bank", bank)["runs"] == 2
    assert cli_json("bank", "stats", "--bank", bank)["seeds_given"] == len(tried)
