"""The searcher benchmark's wiring and its scoring rules: the results file has the interface the
checks read, a replayed trial answers from the table's replay pool, nothing is credited before a
feasible trial, on a full-factorial table every peer's trial is the one its sampler proposed, and
an interrupted replay resumes from what it stored."""

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

KNOBS = ["a", "b", "c"]
PEERS = ["tpe", "gp", "smac", "tpe-prior", "tpe-asha"]


def synthetic_table(
    path: Path,
    baseline_peak: float = 1.0e9,
    repeats: int = 3,
    patch_sets: tuple[str, ...] = ("", "p"),
) -> Path:
    """A full-factorial table of a workload this checkout does not ship: knob ``a`` in 1..3
    (faster and larger as it grows), ``b`` in x/y, ``c`` constant (a column every cell holds
    alike, as a measured table has), times ``patch_sets``."""
    cells = list(itertools.product([1, 2, 3], ["x", "y"], patch_sets))
    for i, (a, b, patch) in enumerate(cells):
        for r in range(repeats):
            step = (
                1.0
                / a
                * (0.9 if b == "y" else 1.0)
                * (1 - 0.05 * len(patch.split("+")) * bool(patch))
            )
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
                    "k_c": "off",
                    "status": "ok",
                    "step_time_s": step * (1 + 0.01 * r),
                    "step_times_s": ";".join(str(step * (1 + 0.01 * r)) for _ in range(5)),
                    "cost_s": 5.0 + 3 * step,
                    "peak_mem_bytes_max": peak,
                },
                KNOBS,
            )
    return path


def test_results_file_has_the_interface_and_replots(tmp_path):
    out, cache = tmp_path / "searchers.json", tmp_path / "cache"
    path = synthetic_table(tmp_path / "synthetic.csv")
    names = ["infrarsi", "random", "tpe", "infrarsi-no-cut"]
    argv = ["--table", str(path), "--seeds", "3", "--searchers", ",".join(names), "--jobs", "2"]
    assert bench.main([*argv, "--out", str(out), "--cache", str(cache)]) == 0
    data = json.loads(out.read_text())
    results = data["results"]["synthetic"]
    assert results["design"] == "full_factorial" and results["cells"] == 12
    assert isinstance(results["informative"], bool)
    for name in names:
        res = results[name]
        assert set(res["regret_norm_median"]) == {"5", "10", "25"}
        assert all(v is not None and v >= 0 for v in res["regret_norm_median"].values())
        for key in ("trials_to_target_median", "cost_to_target_s_median", "oom_trials_median"):
            assert key in res
        assert res["snapped_median"] == 0
        assert len(res["curve"]["regret_norm_by_trial"]) == 3  # 25% of 12 cells
    tests = data["details"]["synthetic"]["tests"]
    assert set(tests) == set(names) - {"infrarsi"}
    assert all(
        {"p_value", "p_holm", "rank_biserial", "median_difference_ci95"} <= set(t)
        for t in tests.values()
    )
    assert data["details"]["synthetic"]["table"]["held_out"]
    assert data["details"]["synthetic"]["table"]["truth_split"] is False  # 3 repeats a cell
    assert "average_rank" in data and "critical_difference" in data
    held_out = data["average_rank_held_out"]  # the synthetic table was chosen on by no rule
    assert held_out == data["average_rank"]
    # 3 repeats a cell: no truth split, so the table takes no part in the ranks
    assert data["critical_difference_held_out"]["tables"] == 0 and not bench.counts(results)
    assert set(data["infrarsi_vs_best_peer"]["synthetic"]) >= {"best_peer", "cost_ratio"}
    out.with_suffix(".png").unlink()
    assert bench.main(["--replot", "--out", str(out)]) == 0
    assert out.with_suffix(".png").stat().st_size > 0


def test_an_interrupted_replay_resumes_and_a_changed_table_replays_afresh(tmp_path, monkeypatch):
    path, cache = synthetic_table(tmp_path / "synthetic.csv"), tmp_path / "cache"
    calls = []
    real = bench.replay
    monkeypatch.setattr(bench, "replay", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    bench.bench_table(path, ["random"], 2, cache)
    assert calls == [0, 1]
    first = json.loads(out_line(cache))
    bench.bench_table(path, ["random"], 3, cache)  # two stored: only the third runs
    assert calls == [0, 1, 2]
    again = bench.bench_table(path, ["random"], 3, cache)["entry"]["random"]
    assert calls == [0, 1, 2] and again["per_seed"]["area"][0] == pytest.approx(
        sum(first["trace"]["regret_norm"]) / len(first["trace"]["regret_norm"])
    )
    with open(path, "a") as handle:  # the table measured further: its replays run again
        handle.write(open(path).read().splitlines()[1] + "\n")
    bench.bench_table(path, ["random"], 1, cache)
    assert calls == [0, 1, 2, 0]


def out_line(cache: Path) -> str:
    (stored,) = list(cache.rglob("random-*.jsonl"))
    return stored.read_text().splitlines()[0]


def test_a_replayed_trial_is_one_of_the_cells_replay_repeats_or_an_oom_above_the_capacity(
    tmp_path,
):
    s = replay.setting_of(tables.load(synthetic_table(tmp_path / "t.csv", repeats=6)))
    assert s.truth_split
    oracle = replay.Oracle(s, seed=3)
    for config, cell in s.by_config.items():
        pool = s.pools[config]
        assert sorted(pool.step_time_s + pool.truth_s) == sorted(cell.step_time_s)
        assert not set(pool.step_time_s) & set(pool.truth_s)  # two disjoint pools
        assert s.true_log[config] == pytest.approx(math.log(sum(pool.truth_s) / len(pool.truth_s)))
        for _ in range(4):
            outcome = oracle.run(config)
            if cell.peak_bytes > s.capacity:
                assert outcome.status == "oom" and outcome.cap_bytes == s.capacity
            else:
                assert outcome.status == "ok" and outcome.ranked_time_per_step_s in pool.step_time_s


def test_the_remeasures_of_a_trial_are_the_same_for_every_searcher(tmp_path):
    s = replay.setting_of(tables.load(synthetic_table(tmp_path / "t.csv", repeats=6)))
    first, second = (
        replay.replay("random", s, seed=4, budget=4),
        replay.replay("random", s, seed=4, budget=4),
    )
    assert first["regret_norm"] == second["regret_norm"]  # common random numbers

    class Ranked:  # two searchers whose top configs are the same at trial 3
        def __init__(self, top):
            self.top, self.history = top, []

        def ranking(self, k):
            return self.top[:k]

    top = list(s.by_config)[2:5]
    a, b = replay.Oracle(s, seed=9), replay.Oracle(s, seed=9)
    a.run(top[0])  # visits of one oracle do not move the re-measures
    assert a.remeasured_best(Ranked(top), 3) == b.remeasured_best(Ranked(top), 3)


def test_nothing_is_credited_before_a_feasible_trial(tmp_path):
    # the baseline itself does not fit: until a trial runs ok, the regret is the worst
    path = synthetic_table(tmp_path / "t.csv", baseline_peak=5.0e9)
    table = tables.load(path)
    assert replay.setting_of(table).regret(None) < math.inf  # the benchmark lets it fit
    s = replay.setting_of(table, capacity=table.capacity_for(replay.OOM_FRACTION))
    assert s.by_config[next(iter(s.by_config))].peak_bytes > s.capacity
    assert s.regret(None) == math.inf and s.regret_norm(None) == 1.0
    for name in ("random", "infrarsi", "tpe"):
        trace = replay.replay(name, s, seed=0, budget=6)
        assert trace["oom"][0] == 1, "the baseline runs first and does not fit"
        assert trace["regret"][0] == math.inf and trace["regret_norm"][0] == 1.0
        first_ok = next(i for i, n in enumerate(trace["oom"]) if n == i)  # oom count stalls
        assert all(math.isinf(r) for r in trace["regret"][:first_ok])
        assert all(r < 1.0 for r in trace["regret_norm"][first_ok:])
    # where the baseline fits, nothing found yet is the baseline's regret, never 0
    fits = replay.setting_of(tables.load(synthetic_table(tmp_path / "u.csv")))
    base = next(iter(fits.by_config))
    assert fits.regret(None) == fits.true_log[base] - fits.best_log > 0.3
    assert fits.regret_norm(None) == fits.regret_norm(base) == 1.0


@pytest.mark.parametrize("name", PEERS)
def test_on_a_full_factorial_table_every_peer_trial_runs_as_its_sampler_proposed(tmp_path, name):
    """Patch sets that exclude each other and a constant knob column: what the peers' lookup
    once missed on every committed table (``replay`` asserts it trial by trial)."""
    table = synthetic_table(tmp_path / "t.csv", patch_sets=("", "p", "q"))
    s = replay.setting_of(tables.load(table))
    trace = replay.replay(name, s, seed=1, budget=8)
    assert trace["snapped"] == 0 and trace["exact"] == 8


def committed_full_factorial() -> list[Path]:
    return [p for p in tables.table_paths(None) if tables.load(p).design == "full_factorial"]


@pytest.mark.parametrize("path", committed_full_factorial(), ids=lambda p: p.stem)
def test_on_every_committed_full_factorial_table_tpe_runs_what_it_proposes(path):
    s = replay.setting_of(tables.load(path))
    trace = replay.replay("tpe", s, seed=0, budget=6)
    assert trace["snapped"] == 0 and trace["exact"] == 6


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gp", "smac", "tpe-prior"])
def test_on_every_committed_full_factorial_table_each_peer_runs_what_it_proposes(name):
    for path in committed_full_factorial():
        s = replay.setting_of(tables.load(path))
        trace = replay.replay(name, s, seed=0, budget=4)
        assert trace["snapped"] == 0 and trace["exact"] == 4, path.stem


def test_a_later_run_of_one_searcher_replaces_only_its_entry_and_the_tests_follow(tmp_path):
    path, cache = tmp_path / "searchers.json", tmp_path / "cache"
    table = synthetic_table(tmp_path / "synthetic.csv")
    first = bench.bench_table(table, ["infrarsi", "random"], 3, cache)
    path.write_text(json.dumps(bench.merge(path, "synthetic", first)))
    later = bench.bench_table(table, ["greedy"], 3, cache)
    merged = bench.merge(path, "synthetic", later)
    assert {"infrarsi", "random", "greedy"} <= set(merged["results"]["synthetic"])
    assert set(merged["details"]["synthetic"]["tests"]) == {"random", "greedy"}
    other = bench.bench_table(table, ["greedy"], 2, cache)  # other seeds: the table afresh
    again = bench.merge(path, "synthetic", other)
    assert "random" not in again["results"]["synthetic"]


def test_a_replayed_trial_past_the_slow_bound_is_cut_there_and_costs_the_bound(tmp_path):
    from infrarsi.run.problem import SlowBound

    s = replay.setting_of(tables.load(synthetic_table(tmp_path / "t.csv")))
    oracle, bound = replay.Oracle(s, seed=0), SlowBound(after_s=6.5, censored_step_time_s=2.0)
    outcomes = {
        c: oracle.run(c, bound) for c, cell in s.by_config.items() if cell.peak_bytes <= s.capacity
    }
    slow = [o for o in outcomes.values() if o.status == "slow"]
    assert slow and all(o.cost_s == 6.5 and o.ranked_time_per_step_s == 2.0 for o in slow)
    assert all(o.cost_s <= 6.5 for o in outcomes.values() if o.status == "ok")


def test_the_multi_fidelity_peer_stops_poor_trials_after_a_few_steps_and_pays_what_ran(tmp_path):
    s = replay.setting_of(tables.load(synthetic_table(tmp_path / "t.csv", repeats=6)))
    trace = replay.replay("tpe-asha", s, seed=2, budget=10)
    assert trace["snapped"] == 0 and trace["exact"] == 10
    searcher = replay.make_searcher("tpe-asha", replay.problem_of(s, 2), 2)
    oracle = replay.Oracle(s, seed=2)
    slow = []
    for _ in range(10):
        config = searcher.ask()
        outcome = oracle.run(config, None, searcher.stop_after)
        searcher.tell(config, outcome)
        if outcome.status == "slow":
            slow.append((config, outcome))
    assert slow, "successive halving stopped no trial"
    for config, outcome in slow:  # charged the steps it ran, not the whole trial
        full = max(s.pools[config].cost_s)
        assert outcome.cost_s < full


def test_a_column_that_follows_the_others_is_found_derived(tmp_path):
    import models

    path = synthetic_table(tmp_path / "t.csv")
    rows = tables.read_rows(path)
    for row in rows:  # accumulation that follows knob a, written as its own column
        row["k_d"] = str({"1": 4, "2": 2, "3": 1}[row["k_a"]])
    tables.rewrite(path, rows, list(rows[0]) + ([] if "k_d" in rows[0] else ["k_d"]))
    table = tables.load(path)
    assert models.inferred_derived(table) == ("d",)  # a and b vary freely, c is constant
    problem = replay.problem_of(replay.setting_of(table), seed=0)
    assert problem.derived == ("d",)  # the searchers are told so, as a manifest would
    for row in rows:
        row["design"] = "sampled"
    tables.rewrite(path, rows)
    assert models.inferred_derived(tables.load(path)) == ()  # a sample says nothing


@pytest.mark.parametrize("name", ["tpe", "smac"])
def test_a_peer_learns_to_avoid_combinations_the_workload_refuses(tmp_path, name):
    """A full factorial whose manifest refused some combinations (a = 3 with b = y here, as
    two ranks with micro-batch 8 are refused where the global batch is 8): the product of
    the peer's parameters names configs that are no cell; told infeasible, the sampler moves
    away, and every trial still runs what it proposed."""
    path = synthetic_table(tmp_path / "t.csv", patch_sets=("", "p", "q"))
    rows = [r for r in tables.read_rows(path) if not (r["k_a"] == "3" and r["k_b"] == "y")]
    tables.rewrite(path, rows)
    s = replay.setting_of(tables.load(path))
    trace = replay.replay(name, s, seed=0, budget=14)
    assert trace["snapped"] == 0 and trace["exact"] == 14


def test_infrarsis_ablations_neither_make_a_table_informative_nor_take_a_rank():
    """An ablation is InfraRSI's own study: a table where only an ablation misses the target
    by trial 2 is uninformative, and the average ranks name no ablation."""

    def row(trials: float | None, area: float) -> dict:
        return {
            "trials_to_target_median": trials,
            "cost_to_target_s_median": trials,
            "per_seed": {"area": [area, area]},
        }

    entry = {"infrarsi": row(1, 0.1), "greedy": row(2, 0.2), "infrarsi-no-censor": row(9, 0.9)}
    assert bench.compared(entry) == {"infrarsi": 1, "greedy": 2}
    assert not bench.scoring.informative(bench.compared(entry))
    counted = {"informative": True, "design": "full_factorial", "truth_split": True}
    ranked = {"t1": {**entry, **counted}, "t2": {**entry, **counted}}
    ranks = bench.overall(ranked)["average_rank"]
    assert set(ranks) == {"infrarsi", "greedy"} and ranks["infrarsi"] == 1.0
    # a sampled table, or one whose truth is made from the repeats trials draw, takes no rank
    assert not bench.counts({**entry, **counted, "design": "sampled"})
    assert not bench.counts({**entry, **counted, "truth_split": False})


def test_a_results_file_says_which_version_replayed_each_table():
    """``searchers.json`` may hold tables replayed at different versions of the search: each
    table's detail keeps the version (``code_hash``), and the file lists the tables per
    version, those replayed before it was kept as unknown."""
    details = {"b": {"code": "v2"}, "a": {"code": "v1"}, "c": {}, "d": {"code": "v2"}}
    assert bench.code_versions(details) == {"v1": ["a"], "v2": ["b", "d"], "unknown": ["c"]}
    committed = json.loads(bench.RESULTS.read_text())
    assert committed["code_versions"] == bench.code_versions(committed["details"])
