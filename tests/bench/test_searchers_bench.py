"""The searcher benchmark's wiring and its scoring rules: the results file has the interface the
checks read, a replayed trial answers from the table, nothing is credited before a feasible
trial, and on a full-factorial table every peer's trial is the one its sampler proposed."""

import itertools
import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import replay  # noqa: E402
import searchers as bench  # noqa: E402
import tables  # noqa: E402

KNOBS = ["a", "b"]


def synthetic_table(path: Path, baseline_peak: float = 1.0e9, repeats: int = 3) -> Path:
    """A full-factorial table of a workload this checkout does not ship: knob ``a`` in 1..3
    (faster and larger as it grows), ``b`` in x/y, patch ``p`` or none."""
    cells = list(itertools.product([1, 2, 3], ["x", "y"], ["", "p"]))
    for i, (a, b, patch) in enumerate(cells):
        for r in range(repeats):
            step = 1.0 / a * (0.9 if b == "y" else 1.0) * (0.95 if patch else 1.0)
            peak = baseline_peak if i == 0 else 0.8e9 + 0.3e9 * a
            tables.append_row(
                path,
                {
                    "table": "synthetic",
                    "design": "full_factorial",
                    "workload": "synthetic",
                    "scale": "bench",
                    "fingerprint": "f",
                    "cell": f"c{i:03d}",
                    "repeat": r,
                    "phase": "grid",
                    "patches": patch,
                    "k_a": a,
                    "k_b": b,
                    "status": "ok",
                    "step_time_s": step * (1 + 0.01 * r),
                    "cost_s": 5.0 + 3 * step,
                    "peak_mem_bytes_max": peak,
                },
                KNOBS,
            )
    return path


def test_results_file_has_the_interface_and_replots(tmp_path):
    out = tmp_path / "searchers.json"
    path = synthetic_table(tmp_path / "synthetic.csv")
    assert (
        bench.main(
            [
                "--table",
                str(path),
                "--seeds",
                "2",
                "--searchers",
                "infrarsi,random,tpe,infrarsi-no-cut",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    results = data["results"]["synthetic"]
    assert results["design"] == "full_factorial"
    assert set(results) == {"design", "infrarsi", "random", "tpe", "infrarsi-no-cut"}
    for name in ("infrarsi", "random", "tpe", "infrarsi-no-cut"):
        res = results[name]
        assert set(res["regret_median"]) == {"10", "20", "40"}
        assert all(v is not None and v >= 0 for v in res["regret_median"].values())
        assert {
            "trials_to_target_median",
            "cost_to_target_s_median",
            "oom_trials_median",
            "share_reaching_target",
        } <= set(res)
        assert (name == "infrarsi") == ("p_vs_infrarsi" not in res)
    assert data["details"]["synthetic"]["table"]["held_out"]
    assert data["constants"]["tuned_on"]
    out.with_suffix(".png").unlink()
    assert bench.main(["--replot", "--out", str(out)]) == 0
    assert out.with_suffix(".png").stat().st_size > 0


def test_a_replayed_trial_is_one_of_the_cells_repeats_or_an_oom_above_the_capacity(tmp_path):
    s = replay.setting_of(tables.load(synthetic_table(tmp_path / "t.csv")))
    oracle = replay.Oracle(s, seed=3)
    for config, cell in s.by_config.items():
        outcome = oracle.run(config)
        if cell.peak_bytes > s.capacity:
            assert outcome.status == "oom" and outcome.cap_bytes == s.capacity
        else:
            assert outcome.status == "ok" and outcome.step_time_s in cell.step_time_s


def test_nothing_is_credited_before_a_feasible_trial(tmp_path):
    # the baseline itself does not fit: until a trial runs ok, the regret is infinite
    path = synthetic_table(tmp_path / "t.csv", baseline_peak=5.0e9)
    table = tables.load(path)
    assert replay.setting_of(table).regret(None) < math.inf  # the benchmark lets it fit
    s = replay.setting_of(table, capacity=table.capacity_for(replay.OOM_FRACTION))
    assert s.by_config[next(iter(s.by_config))].peak_bytes > s.capacity
    assert s.regret(None) == math.inf
    for name in ("random", "infrarsi", "tpe"):
        trace = replay.replay(name, s, seed=0, budget=6)
        assert trace["oom"][0] == 1, "the baseline runs first and does not fit"
        assert trace["regret"][0] == math.inf and trace["regret_own"][0] == math.inf
        first_ok = next(i for i, n in enumerate(trace["oom"]) if n == i)  # oom count stalls
        assert all(math.isinf(r) for r in trace["regret"][:first_ok])
        assert all(math.isfinite(r) for r in trace["regret"][first_ok:])
    # where the baseline fits, nothing found yet is the baseline's regret, never 0
    fits = replay.setting_of(tables.load(synthetic_table(tmp_path / "u.csv")))
    base = next(iter(fits.by_config))
    assert fits.regret(None) == fits.true_log[base] - fits.best_log > 0.3


@pytest.mark.parametrize("name", ["tpe", "gp", "smac"])
def test_on_a_full_factorial_table_every_peer_trial_runs_as_its_sampler_proposed(tmp_path, name):
    s = replay.setting_of(tables.load(synthetic_table(tmp_path / "t.csv")))
    trace = replay.replay(name, s, seed=1, budget=6)
    assert trace["snapped"] == 0 and trace["exact"] >= 5


def test_a_later_run_of_one_searcher_replaces_only_its_entry_and_the_tests_follow(tmp_path):
    path = tmp_path / "searchers.json"
    settings = {"seeds": 3, "budget": 40, "checkpoints": [10, 20, 40], "oom_fraction": 0.3}

    def entry(regret):
        return {"per_seed": {"regret": {b: regret for b in ("10", "20", "40")}}}

    first = {
        "settings": settings,
        "results": {
            "t": {
                "design": "sampled",
                "infrarsi": entry([0.3, 0.3, 0.3]),
                "random": entry([0.2, 0.2, 0.2]),
            }
        },
    }
    path.write_text(json.dumps(first))
    later = {
        "settings": settings,
        "results": {"t": {"infrarsi": entry([0.0, 0.1, 0.0])}},
        "details": {"t": {"table": {"cells": 10}}},
    }
    merged = bench.merge(path, later)
    assert merged["results"]["t"]["random"]["per_seed"] == entry([0.2, 0.2, 0.2])["per_seed"]
    assert merged["results"]["t"]["infrarsi"] == entry([0.0, 0.1, 0.0])
    assert merged["details"]["t"]["tests"]["random"]["median_regret_difference"] == pytest.approx(
        0.2
    )
    path.write_text(
        json.dumps(
            dict(
                merged,
                results={
                    **merged["results"],
                    "u": {"design": "sampled", "random": entry([0.1, 0.1, 0.1])},
                },
            )
        )
    )
    other = dict(later, settings=dict(settings, seeds=50))  # other settings: table t afresh
    again = bench.merge(path, other)
    assert "random" not in again["results"]["t"] and again["settings"]["seeds"] == 50
    assert again["results"]["u"]["random"] == entry([0.1, 0.1, 0.1])  # other tables stay


def test_a_table_replayed_with_its_own_seeds_merges_after_another_used_other_seeds(tmp_path):
    """The file's top-level settings are the newest run's (table u at 10 seeds); table t was
    measured at 30 — replaying one searcher on t at 30 keeps t's peers."""
    path = tmp_path / "searchers.json"
    settings = {
        "seeds": 10,
        "budget": 40,
        "checkpoints": [10, 20, 40],
        "oom_fraction": 0.3,
        "few_seeds": 5,
    }

    def entry(regret):
        return {"per_seed": {"regret": {b: regret for b in ("10", "20", "40")}}}

    path.write_text(
        json.dumps(
            {
                "settings": settings,
                "results": {
                    "t": {
                        "design": "full_factorial",
                        "infrarsi": entry([0.3] * 3),
                        "random": entry([0.2] * 3),
                    },
                    "u": {"design": "sampled", "random": entry([0.1] * 3)},
                },
                "details": {"t": {"seeds": 30, "few_seeds": 5}, "u": {"seeds": 10, "few_seeds": 5}},
            }
        )
    )
    later = {
        "settings": dict(settings, seeds=30),
        "results": {"t": {"infrarsi": entry([0.0] * 3)}},
        "details": {"t": {"seeds": 30, "few_seeds": 5}},
    }
    merged = bench.merge(path, later)
    assert merged["results"]["t"]["random"]["per_seed"] == entry([0.2] * 3)["per_seed"]
    assert merged["results"]["t"]["infrarsi"] == entry([0.0] * 3)
    assert merged["details"]["t"]["tests"]["random"]["median_regret_difference"] == pytest.approx(
        0.2
    )


def test_a_replayed_trial_past_the_slow_bound_is_cut_there_and_costs_the_bound(tmp_path):
    from infrarsi.run.problem import SlowBound

    s = replay.setting_of(tables.load(synthetic_table(tmp_path / "t.csv")))
    oracle, bound = replay.Oracle(s, seed=0), SlowBound(after_s=6.5, censored_step_time_s=2.0)
    outcomes = {
        c: oracle.run(c, bound) for c, cell in s.by_config.items() if cell.peak_bytes <= s.capacity
    }
    slow = [o for o in outcomes.values() if o.status == "slow"]
    assert slow and all(o.cost_s == 6.5 and o.step_time_s == 2.0 for o in slow)
    assert all(o.cost_s <= 6.5 for o in outcomes.values() if o.status == "ok")
