"""The transfer benchmark's wiring: a table becomes a bank of experiences (the harmful bank is
its mirror image), and a pair of tables of one workload on two hosts is replayed warm, cold and
harmful in both directions into the results file the checks read."""

import json
import math
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import tables  # noqa: E402
import transfer  # noqa: E402
from test_searchers_bench import synthetic_table  # noqa: E402


def _host(path: Path, fingerprint: str) -> Path:
    """The synthetic table as measured on another host (another fingerprint)."""
    rows = tables.read_rows(synthetic_table(path.with_suffix(".tmp.csv")))
    for row in rows:
        row["fingerprint"] = fingerprint
    tables.rewrite(path, rows)
    return path


def test_a_table_becomes_experiences_and_the_harmful_bank_is_its_mirror(tmp_path):
    table = tables.load(_host(tmp_path / "a.csv", "hostA"))
    bank = transfer.experiences_of(table, {"fingerprint": "hostA"}, {"name": "synthetic"})
    mirror = transfer.experiences_of(
        table, {"fingerprint": "hostA"}, {"name": "synthetic"}, negate=True
    )
    assert len(bank) == sum(len(c.status) for c in table.cells.values())
    for e, m in zip(bank, mirror):
        assert e.status == m.status == "ok" and e.speedup and e.knobs_json == m.knobs_json
        assert (
            math.log(e.speedup) == -math.log(m.speedup)
            or abs(math.log(e.speedup) + math.log(m.speedup)) < 1e-12
        )


def test_a_pair_is_replayed_warm_cold_and_harmful_both_ways(tmp_path):
    a, b = _host(tmp_path / "a.csv", "hostA"), _host(tmp_path / "b.csv", "hostB")
    out = tmp_path / "transfer.json"
    assert (
        transfer.main(["--pair", str(a), str(b), "--seeds", "2", "--out", str(out), "--jobs", "2"])
        == 0
    )  # both directions at once
    results = json.loads(out.read_text())["results"]
    assert list(results) == ["a -> b", "b -> a"]
    for r in results.values():
        for way in ("warm", "cold", "harmful"):
            assert f"{way}_trials_to_target_median" in r
            assert set(r[f"{way}_regret"]) == {"5", "10", "20"}
        assert 0 < r["similarity"] <= 1
        assert r["warm_vs_cold"] in ("warm fewer", "tie at the floor", "warm not fewer")
        assert isinstance(r["harmful_within_10pct_of_cold"], bool)


def _direction(warm, cold, harmful, floor=2):
    return {
        "warm_trials_to_target_median": warm,
        "cold_trials_to_target_median": cold,
        "harmful_trials_to_target_median": harmful,
        "floor_trials": floor,
    }


def test_the_verdict_tells_a_tie_at_the_floor_from_a_bank_that_did_not_help():
    assert transfer.verdict(_direction(3, 6, 6)) == {
        "warm_vs_cold": "warm fewer",
        "harmful_within_10pct_of_cold": True,
    }
    assert transfer.verdict(_direction(2, 2, 2))["warm_vs_cold"] == "tie at the floor"
    assert transfer.verdict(_direction(4, 4, 4))["warm_vs_cold"] == "warm not fewer"
    assert transfer.verdict(_direction(3, None, None)) == {  # cold and harmful never reach it
        "warm_vs_cold": "warm fewer",
        "harmful_within_10pct_of_cold": True,
    }
    assert not transfer.verdict(_direction(3, 6, 7))["harmful_within_10pct_of_cold"]
    assert not transfer.verdict(_direction(3, 6, None))["harmful_within_10pct_of_cold"]


def test_a_warm_replay_knows_each_seeds_measured_peak_ratio_and_the_targets_baseline_peak(tmp_path):
    """What a run has before its search: the bank's seeds with their peak over their source's
    baseline peak, and this host's baseline peak as the Doctor measures it."""
    from replay import OOM_FRACTION, setting_of

    source = tables.load(_host(tmp_path / "a.csv", "hostA"))
    target = tables.load(_host(tmp_path / "b.csv", "hostB"))
    bank = transfer.experiences_of(source, {"fingerprint": "hostA"}, {"name": "synthetic"})
    problem, _ = transfer.warm_problem(
        setting_of(target, OOM_FRACTION), 0, bank, {"fingerprint": "hostB"}, {"name": "synthetic"}
    )
    assert problem.bank_seeds and set(problem.bank_peak) == set(problem.bank_seeds)
    assert problem.baseline_peak_bytes == max(target.cells[target.baseline].peak_mem_bytes)
    base_peak = max(source.cells[source.baseline].peak_mem_bytes)
    key = lambda c: transfer.config_key(c.knob_dict, c.patches)  # noqa: E731
    cells = {key(transfer.config_of(c)): c for c in source.cells.values()}
    for config in problem.bank_seeds:
        logs = [math.log(p / base_peak) for p in cells[key(config)].peak_mem_bytes]
        assert math.isclose(problem.bank_peak[config], sum(logs) / len(logs), rel_tol=1e-9)
