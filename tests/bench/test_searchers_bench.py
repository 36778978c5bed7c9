"""The searcher benchmark's wiring on a committed table: the results file has the interface the
checks read, a replayed trial answers from the table, and the plot is drawn again from the file."""

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import searchers as bench  # noqa: E402
import tables  # noqa: E402


def _a_table() -> Path:
    paths = tables.table_paths(None)
    if not paths:
        pytest.skip("no committed table in bench/data")
    return next((p for p in paths if "moe-1node" in p.name), paths[0])


def test_results_file_has_the_interface_and_replots(tmp_path):
    out = tmp_path / "searchers.json"
    path = _a_table()
    assert bench.main(["--quick", "--table", str(path), "--seeds", "2",
                       "--searchers", "infrarsi,random,greedy,grid", "--out", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    table = tables.load(path).name
    assert set(results[table]) == {"infrarsi", "random", "greedy", "grid"}
    for res in results[table].values():
        assert 1 <= res["trials_to_95_median"] <= 15
        assert res["oom_trials_median"] >= 0
        assert set(res["best_speedup_median"]) == {"5", "10", "15"}
        assert all(s > 0 for s in res["best_speedup_median"].values())
    out.with_suffix(".png").unlink()
    assert bench.main(["--replot", "--out", str(out)]) == 0
    assert out.with_suffix(".png").stat().st_size > 0


def test_a_replayed_trial_is_one_of_the_cells_repeats_or_an_oom_above_the_capacity():
    table = tables.load(_a_table())
    capacity = table.capacity_for(bench.OOM_FRACTION)
    problem, by_config = bench.problem_of(table, capacity)
    oracle = bench.Oracle(by_config, capacity, 0.5, seed=3)
    for config in problem.candidates[:30]:
        cell, outcome = by_config[config], oracle.run(config)
        if not cell.ok:
            assert outcome.status != "ok"
        elif cell.peak_bytes and cell.peak_bytes > capacity:
            assert outcome.status == "oom" and outcome.cap_bytes == capacity
        else:
            assert outcome.step_time_s in cell.step_time_s


def test_a_later_run_of_one_searcher_replaces_only_its_entry_and_the_tests_follow(tmp_path):
    path = tmp_path / "searchers.json"
    settings = {"seeds": 3, "budgets": [5], "oom_fraction": 0.3}

    def entry(to95):
        return {"trials_to_95": to95, "trials_to_95_median": sorted(to95)[1]}
    first = {"settings": settings, "results": {"t": {"infrarsi": entry([9, 9, 9]),
                                                     "random": entry([5, 5, 5])}}}
    path.write_text(json.dumps(first))
    later = {"settings": settings, "results": {"t": {"infrarsi": entry([2, 3, 4])}},
             "details": {"t": {"table": {"cells": 10}}}}
    merged = bench.merge(path, later)
    assert merged["results"]["t"]["random"] == entry([5, 5, 5])
    assert merged["results"]["t"]["infrarsi"] == entry([2, 3, 4])
    assert merged["details"]["t"]["tests"]["random"]["median_difference"] == 2.0
    other = dict(later, settings=dict(settings, seeds=50))  # other settings: a fresh file
    assert "random" not in bench.merge(path, other)["results"]["t"]
