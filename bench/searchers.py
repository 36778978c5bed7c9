"""Replay every searcher on the measured tables: how fast each finds a config as fast as the best.

    .venv/bin/python bench/searchers.py                      # every table, 30 seeds
    .venv/bin/python bench/searchers.py --quick              # 3 seeds, a few minutes
    .venv/bin/python bench/searchers.py --table other.csv --seeds 10 --out other.json
    .venv/bin/python bench/searchers.py --replot             # the plot again from searchers.json

Each searcher is given what a user of it could give it and replayed on each table at a capacity
where ~30% of the ok cells do not fit (``replay.py``: the problem, the oracle, the pools of
repeats, the two recommendation rules). The budget is 25% of the table's cells; results are
keyed by percent of the cells (``scoring.BUDGET_PCTS``). Per table and searcher, over seeds:
the normalised regret of the recommendation (the shared ``remeasure`` rule; the searcher's own
incumbent beside it) with bootstrap intervals of the median, its anytime curves over trials and
over wall cost (the trials' cost and the searcher's own compute), trials and wall cost until
the recommendation stays in the target set, OOM trials, and proposals that ran at a nearest
candidate (``snapped``: 0 for every peer on a full-factorial table, checked trial by trial).
Per table, each peer against InfraRSI: two-sided paired Wilcoxon tests of the per-seed area
under the regret curve, Holm-corrected, with effect sizes and intervals; a table every
searcher solves by its second trial is marked uninformative. Over the informative tables, each
searcher's average rank and Nemenyi's critical difference (``scoring.py``).

Every (table, searcher, seed) replay is stored as it finishes under ``bench/.cache/searchers``,
keyed by a hash of the code and rules that produce it: an interrupted run resumes, and a run
after any change to them replays afresh. The constants and the tables they were chosen on are
``bench/constants.json`` (``rules.py``); a table chosen on by none is held out.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # small models: a second thread only spins (see run.space)

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

import rules  # noqa: E402
import scoring  # noqa: E402
import tables  # noqa: E402
from peers import ABLATIONS, PEERS  # noqa: E402
from replay import OOM_FRACTION, TRUTH_SPLIT_MIN, replay, setting_of  # noqa: E402

from infrarsi.run import searchers as registry  # noqa: E402

BENCH = Path(__file__).parent
RESULTS = BENCH / "results" / "searchers.json"
CACHE = BENCH / ".cache" / "searchers"
DEFAULT_SEEDS = 30
OURS = "infrarsi"
HASHED = (  # what a replay's result depends on, besides the table itself
    "src/infrarsi/run",
    "src/infrarsi/identity.py",
    "bench/replay.py",
    "bench/scoring.py",
    "bench/smac_peer.py",
    "bench/peers.py",
    "bench/fidelity_peer.py",
    "bench/models.py",
    "bench/tables.py",
)


def all_searchers() -> list[str]:
    """Every searcher the benchmark knows: the registry's, the benchmark's peers, ablations."""
    return list(registry.SEARCHERS) + list(PEERS) + list(ABLATIONS)


def code_hash(root: Path = BENCH.parent) -> str:
    """A hash of the code and rules a replay depends on (``HASHED``) and of the samplers'
    library versions."""
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256()
    for rel in HASHED:
        path = root / rel
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    for lib in ("optuna", "smac", "numpy", "scipy", "scikit-learn", "torch"):
        try:
            h.update(f"{lib}={version(lib)}".encode())
        except PackageNotFoundError:
            h.update(f"{lib}=none".encode())
    return h.hexdigest()[:16]


def table_hash(path: Path) -> str:
    """A hash of a table's file: a table measured further replays afresh."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


class TraceStore:
    """Every finished (table, searcher, seed) replay, one JSON line each, in a file per table,
    searcher and key (code, table, budget)."""

    def __init__(self, root: Path, key: str):
        self.root, self.key = Path(root), key

    def path(self, table: str, searcher: str) -> Path:
        return self.root / table / f"{searcher}-{self.key}.jsonl"

    def load(self, table: str, searcher: str) -> dict[int, dict]:
        path = self.path(table, searcher)
        out: dict[int, dict] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by a kill: replayed again
                    continue
                out[int(row["seed"])] = row["trace"]
        return out

    def add(self, table: str, searcher: str, seed: int, trace: dict) -> None:
        path = self.path(table, searcher)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as handle:
            handle.write(json.dumps({"seed": seed, "trace": _jsonable(trace)}) + "\n")
            handle.flush()


def _jsonable(trace: dict) -> dict:
    return {
        k: [None if isinstance(v, float) and not math.isfinite(v) else v for v in vals]
        if isinstance(vals, list)
        else vals
        for k, vals in trace.items()
    }


def _num(values: list) -> list[float]:
    return [math.inf if v is None else float(v) for v in values]


def _json(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _median(values: list[float]) -> float | None:
    return _json(statistics.median(values)) if values else None


def checkpoints(cells: int) -> dict[str, int]:
    """Trials at each budget percentage of a table's cells."""
    return {str(p): scoring.budget_trials(cells, p) for p in scoring.BUDGET_PCTS}


def summarise(traces: list[dict], cells: int, cost_grid_s: list[float]) -> dict:
    """One searcher on one table, over seeds (see the module's docstring)."""
    marks = checkpoints(cells)

    def at(key: str, n: int) -> list[float]:
        return [_num(t[key])[n - 1] for t in traces]

    hits = [scoring.trials_to_target(t["in_target"]) for t in traces]
    own_hits = [scoring.trials_to_target(t["in_target_own"]) for t in traces]
    trials = [math.inf if h is None else h for h in hits]
    costs = [math.inf if h is None else _num(t["cost_s"])[h - 1] for t, h in zip(traces, hits)]
    areas = [scoring.area(_num(t["regret_norm"])) for t in traces]
    budget = len(traces[0]["regret_norm"])
    return {
        "regret_norm_median": {p: _median(at("regret_norm", n)) for p, n in marks.items()},
        "regret_norm_ci95": {
            p: [_json(v) for v in scoring.boot_median_interval(np.array(at("regret_norm", n)))]
            for p, n in marks.items()
        },
        "trials_to_target_median": _median(trials),
        "cost_to_target_s_median": _median(costs),
        "share_reaching_target": sum(h is not None for h in hits) / len(traces),
        "oom_trials_median": _median(at("oom", budget)),
        "snapped_median": _median([float(t["snapped"]) for t in traces]),
        "searcher_cpu_s_median": _median(at("searcher_cpu_s", budget)),
        "cost_s_median": _median(at("cost_s", budget)),
        "regret_area_median": _median(areas),
        "own_rule": {
            "regret_norm_median": {p: _median(at("regret_norm_own", n)) for p, n in marks.items()},
            "trials_to_target_median": _median([math.inf if h is None else h for h in own_hits]),
        },
        "curve": {
            "regret_norm_by_trial": [_median(at("regret_norm", n)) for n in range(1, budget + 1)],
            "regret_norm_by_cost": [
                statistics.median(regret_at_cost(t, c) for t in traces) for c in cost_grid_s
            ],
        },
        "per_seed": {
            "area": areas,
            "trials_to_target": [_json(v) for v in trials],
            "cost_to_target_s": [_json(v) for v in costs],
        },
    }


def regret_at_cost(trace: dict, cost_s: float) -> float:
    """The normalised regret of the recommendation once ``cost_s`` seconds were spent (1:
    nothing finished by then)."""
    spent = _num(trace["cost_s"])
    done = [i for i, c in enumerate(spent) if c <= cost_s]
    return float(trace["regret_norm"][done[-1]]) if done else 1.0


def cost_grid(table: tables.Table, budget: int) -> list[float]:
    """The wall-cost axis of a table's anytime curves: multiples of its mean trial cost."""
    mean = statistics.fmean(c.mean_cost_s for c in table.cells.values() if c.cost_s) or 1.0
    return [round(mean * k, 3) for k in range(1, budget + 1)]


def counts(entry: dict) -> bool:
    """Whether a table takes part in the ranks: informative, full-factorial (on a sampled
    table a peer's proposal snaps to the nearest measured cell, so it did not run what its
    sampler proposed) and with the truth of each cell made from repeats the replay never
    draws (``truth_split``)."""
    return bool(
        entry.get("informative")
        and entry.get("design") == "full_factorial"
        and entry.get("truth_split")
    )


def compared(per: dict) -> dict[str, float | None]:
    """Each searcher's median trials to the target on one table, InfraRSI's ablations left
    out: an ablation is InfraRSI's own study, so it neither makes a table informative nor takes
    a rank among the searchers compared."""
    return {
        n: r["trials_to_target_median"]
        for n, r in per.items()
        if isinstance(r, dict) and "trials_to_target_median" in r and n not in ABLATIONS
    }


def tests_of(per: dict) -> dict:
    """The paired two-sided tests of one table's searchers against InfraRSI."""
    scores = {
        n: np.array(_num(r["per_seed"]["area"]))
        for n, r in per.items()
        if isinstance(r, dict) and "per_seed" in r
    }
    return scoring.paired_tests(scores, OURS, apart=frozenset(ABLATIONS))


def replay_seeds(path: Path, name: str, seeds: int, store_root: Path) -> dict[int, dict]:
    """One searcher's replays of one table for seeds ``0..seeds-1``: those stored, and the
    others run and stored as each finishes (a worker of its own: one file per searcher)."""
    table = tables.load(path)
    s = setting_of(table, OOM_FRACTION)
    budget = scoring.budget_trials(len(table.cells), max(scoring.BUDGET_PCTS))
    store = TraceStore(store_root, f"{code_hash()}-{table_hash(path)}-b{budget}")
    done = store.load(table.name, name)
    for seed in range(seeds):
        if seed not in done:
            done[seed] = _jsonable(replay(name, s, seed, budget))
            store.add(table.name, name, seed, done[seed])
    return {k: done[k] for k in range(seeds)}


def _all_replays(path: Path, names: list[str], seeds: int, store_root: Path, jobs: int):
    """(searcher, its replays) as each searcher is done; ``jobs`` > 1 replays searchers in
    parallel processes (replays are not timed: the searchers' compute is CPU time)."""
    if jobs <= 1:
        for name in names:
            yield name, replay_seeds(path, name, seeds, store_root)
        return
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {n: pool.submit(replay_seeds, path, n, seeds, store_root) for n in names}
        for name in names:
            yield name, futures[name].result()


def bench_table(
    path: Path, names: list[str], seeds: int, store_root: Path = CACHE, jobs: int = 1
) -> dict:
    """Every searcher over every seed on one table (resuming from the store); the table's
    entry of the results and its details."""
    table = tables.load(path)
    s = setting_of(table, OOM_FRACTION)
    cells = len(table.cells)
    budget = scoring.budget_trials(cells, max(scoring.BUDGET_PCTS))
    grid = cost_grid(table, budget)
    if not s.truth_split:
        print(
            f"  {table.name}: fewer than {TRUTH_SPLIT_MIN} repeats in some cell — every repeat "
            "both answers trials and makes the truth",
            file=sys.stderr,
        )
    per = {}
    t0 = time.perf_counter()
    for name, done in _all_replays(path, names, seeds, store_root, jobs):
        per[name] = summarise(list(done.values()), cells, grid)
        r = per[name]
        print(
            f"  {table.name} {name:20s} regret@5/10/25%: "
            + "/".join(str(_round(v)) for v in r["regret_norm_median"].values())
            + f"  to target: {r['trials_to_target_median']} trials, "
            f"{_round(r['cost_to_target_s_median'])} s  snapped {r['snapped_median']}"
            f"  ({time.perf_counter() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    entry = {
        "design": table.design,
        "cells": cells,
        "informative": scoring.informative(compared(per), s.something_to_find),
        "something_to_find": s.something_to_find,
        "truth_split": s.truth_split,
        **per,
    }
    feasible = table.feasible(s.capacity)
    detail = {
        "tests": tests_of(per),
        "code": code_hash(),  # the search and the benchmark's rules it was replayed with
        "seeds": seeds,
        "budget_trials": budget,
        "checkpoints_trials": checkpoints(cells),
        "cost_grid_s": grid,
        "table": {
            "capacity_bytes": s.capacity,
            "cells": cells,
            "oom_share": 1 - len(feasible) / max(1, len([c for c in table.cells.values() if c.ok])),
            "target_cells": len(s.target),
            "best_speedup": math.exp(s.norm_log - s.best_log),
            "baseline_fits": math.isfinite(s.baseline_regret),
            "truth_split": s.truth_split,
            "held_out": rules.held_out(table.name),
            "retired": rules.retired(table.name),
        },
    }
    return {"entry": entry, "detail": detail}


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def overall(results: dict) -> dict:
    """Average ranks over the tables that count (``counts``; by each searcher's mean per-seed
    area; InfraRSI's ablations take no rank) and Nemenyi's critical difference."""
    per_table = {
        name: {
            s: float(np.mean(_num(r["per_seed"]["area"])))
            for s, r in entry.items()
            if isinstance(r, dict) and "per_seed" in r and s not in ABLATIONS
        }
        for name, entry in results.items()
        if counts(entry) and not rules.retired(name)
    }
    held = {name: areas for name, areas in per_table.items() if rules.held_out(name)}
    ranks, held_ranks = scoring.average_ranks(per_table), scoring.average_ranks(held)
    return {
        "infrarsi_vs_best_peer": {
            name: against_best_peer(entry) for name, entry in results.items() if OURS in entry
        },
        "average_rank": dict(sorted(ranks.items(), key=lambda kv: kv[1])),
        "critical_difference": _cd(
            ranks, per_table, "the informative full-factorial tables with a truth split"
        ),
        # the judgement the rules were frozen for: only tables measured after their freeze
        "average_rank_held_out": dict(sorted(held_ranks.items(), key=lambda kv: kv[1])),
        "critical_difference_held_out": _cd(held_ranks, held, "the informative held-out tables"),
    }


def _cd(ranks: dict, per_table: dict, over: str) -> dict:
    """The Nemenyi critical difference of ``ranks`` over ``per_table``'s tables."""
    return {
        "alpha": scoring.ALPHA,
        "tables": len(per_table),
        "searchers": len(ranks),
        "cd": scoring.critical_difference(len(ranks), len(per_table)),
        "method": "Nemenyi, average ranks of the mean per-seed area under the normalised "
        f"regret curve over {over}",
    }


def against_best_peer(entry: dict) -> dict:
    """InfraRSI's median wall cost to the target against the best peer's (the lowest median
    among the searchers that are not InfraRSI or its ablations; a searcher that never
    reaches it counts as infinite): the ratio the issue's 0.7 is read against."""
    peers = {
        n: r["cost_to_target_s_median"]
        for n, r in entry.items()
        if isinstance(r, dict) and "per_seed" in r and not n.startswith(OURS)
    }
    ours = entry[OURS]["cost_to_target_s_median"]
    reached = {n: c for n, c in peers.items() if c is not None}
    if not reached:
        return {"best_peer": None, "cost_ratio": 0.0 if ours is not None else None}
    best = min(reached, key=reached.get)
    ratio = None if ours is None else ours / reached[best]
    return {"best_peer": best, "best_peer_cost_s": reached[best], "cost_ratio": ratio}


def merge(path: Path, table_name: str, new: dict) -> dict:
    """The results file with one table's replay merged in: searchers replayed now replace
    their entries, the table's other searchers stay when they were replayed with the same
    seeds and budget (their per-seed results are paired again), other tables stay; the tests
    and the ranks are computed again."""
    old = json.loads(path.read_text()) if path.exists() else {}
    results, details = old.get("results", {}), old.get("details", {})
    kept = results.get(table_name, {})
    before = details.get(table_name, {})
    same = {k: before.get(k) for k in ("seeds", "budget_trials")} == {
        k: new["detail"][k] for k in ("seeds", "budget_trials")
    }
    entry = {**(kept if same else {}), **new["entry"]}
    entry["informative"] = scoring.informative(
        compared(entry), bool(entry.get("something_to_find", True))
    )
    results[table_name] = entry
    details[table_name] = {**new["detail"], "tests": tests_of(entry)}
    return {
        "results": results,
        **overall(results),
        "details": details,
        "settings": {
            "budget_pcts": list(scoring.BUDGET_PCTS),
            "oom_fraction": OOM_FRACTION,
            "primary_rule": "remeasure: the top 3 of each searcher and the baseline re-measured "
            "twice, the best mean recommended (own_rule: the searcher's own incumbent)",
            "target": f"within max({scoring.TARGET_SE} standard errors of the best, "
            f"{scoring.TARGET_MIN_GAP:.0%}) of the best and faster than the baseline",
            "trials_to_target": "the first trial from which the recommendation stays in the "
            "target set",
        },
        "constants": {
            "registry": "bench/constants.json",
            "held_out_tables": sorted(n for n in results if rules.held_out(n)),
        },
        "code_versions": code_versions(details),
    }


def code_versions(details: dict) -> dict[str, list[str]]:
    """Which tables were replayed with which version of the search and the benchmark's rules
    (``code_hash``): a results file whose tables span several versions says so. Tables
    replayed before the version was kept are under ``"unknown"``."""
    out: dict[str, list[str]] = {}
    for table, detail in sorted(details.items()):
        out.setdefault(detail.get("code") or "unknown", []).append(table)
    return out


def plot(results: dict, details: dict, path: Path) -> None:
    """Per table: each searcher's median normalised regret by trial (top) and by wall cost
    (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, axes = plt.subplots(2, len(names), figsize=(4.5 * len(names), 7.0), squeeze=False)
    for col, name in enumerate(names):
        top, bottom = axes[0][col], axes[1][col]
        grid = details.get(name, {}).get("cost_grid_s", [])
        for searcher, res in results[name].items():
            if not isinstance(res, dict):
                continue
            by_trial = res["curve"]["regret_norm_by_trial"]
            (line,) = top.plot(range(1, len(by_trial) + 1), by_trial, label=searcher)
            if grid:
                bottom.plot(grid, res["curve"]["regret_norm_by_cost"], color=line.get_color())
        entry = results[name]
        tag = "" if entry.get("informative") else ", uninformative"
        top.set_title(f"{name} ({entry.get('design')}{tag})", fontsize=8)
        top.set_xlabel("trials")
        top.set_ylabel("median normalised regret")
        bottom.set_xlabel("wall cost (s), trials + searcher compute")
        bottom.set_ylabel("median normalised regret")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a reduced version (3 seeds)")
    parser.add_argument("--table", action="append", help="a table CSV (default: bench/data)")
    parser.add_argument("--seeds", type=int, default=None, help=f"default {DEFAULT_SEEDS}")
    parser.add_argument("--searchers", default=",".join(all_searchers()))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--cache", type=Path, default=CACHE, help="where finished replays are kept (resume)"
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="searchers replayed at once, one process each"
    )
    parser.add_argument(
        "--replot", action="store_true", help="only draw the plot again from the results file"
    )
    args = parser.parse_args(argv)
    if args.replot:
        _plot_file(args.out)
        return 0
    paths = tables.table_paths(args.table)
    if not paths:
        parser.error("no table: measure one with bench/make_table.py or give --table PATH")
    names = [n for n in args.searchers.split(",") if n]
    unknown = [n for n in names if n not in all_searchers()]
    if unknown:
        parser.error(f"--searchers {','.join(unknown)}: choose among {', '.join(all_searchers())}")
    seeds = args.seeds or (3 if args.quick else DEFAULT_SEEDS)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for path in paths:  # each table saved as it is done
        one = bench_table(path, names, seeds, args.cache, args.jobs)
        name = tables.load(path).name
        if rules.held_out(name) and args.out == RESULTS:
            keep_first(name, one, seeds)
        merged = merge(args.out, name, one)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(merged, indent=1))
        tmp.replace(args.out)
    _plot_file(args.out)
    print(f"-> {args.out}")
    return 0


def first_replay_path(table: str) -> Path:
    """Where a held-out table's first replay is kept, unrevised."""
    return RESULTS.parent / f"searchers-first-{table}.json"


def keep_first(table: str, one: dict, seeds: int) -> Path | None:
    """Write a held-out table's first full replay (every searcher, the default seeds) once,
    with the commit it ran at; a later replay never rewrites it. None when it exists or this
    replay is not a full one."""
    import subprocess

    path = first_replay_path(table)
    full = set(all_searchers()) <= set(one["entry"]) and seeds >= DEFAULT_SEEDS
    if path.exists() or not full:
        return None
    commit = subprocess.run(
        ["git", "-C", str(BENCH.parent), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    entry = {"results": {table: one["entry"]}, "details": {table: one["detail"]}}
    path.write_text(json.dumps({**entry, "commit": commit, "seeds": seeds}, indent=1))
    return path


def _plot_file(path: Path) -> None:
    """The plot beside a results file (``searchers.png`` for ``searchers.json``)."""
    out = json.loads(path.read_text())
    try:
        plot(out["results"], out.get("details", {}), path.with_suffix(".png"))
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
