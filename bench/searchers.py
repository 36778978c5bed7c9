"""Replay every searcher on the measured tables: how fast each finds a fast config that fits.

    .venv/bin/python bench/searchers.py            # every table, 50 seeds, budgets 5..60
    .venv/bin/python bench/searchers.py --quick    # a reduced version, under a minute
    .venv/bin/python bench/searchers.py --table other.csv --searchers infrarsi,random
    .venv/bin/python bench/searchers.py --replot   # the plot again from searchers.json

A replayed trial of a cell at the capacity (per rank, where ~30% of the ok cells are OOM) is
``oom`` when the cell's peak is above it — charged the cell's cost times the OOM/ok cost ratio
the table's capped validation rows measured — and otherwise one of the cell's repeats drawn at
random (common random numbers: the same seed draws the same repeat for the same visit, whatever
the searcher). Each searcher's *recommended* config after each trial is scored by its true speed
(the mean over repeats): speed-up = baseline mean step time / recommended mean step time.

Writes ``bench/results/searchers.json`` (per table and searcher: median and IQR of that speed-up
per budget and per wall cost, trials to reach 95% of the table's best feasible speed-up — its
median and the per-seed values — OOM trials and wall cost spent, paired Wilcoxon tests against
InfraRSI) and ``searchers.png``. A run of some searchers or tables at the same settings
replaces only their entries (``--searchers infrarsi`` after a change to the searcher).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # small models: a second thread only spins (see run.space)

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

import tables  # noqa: E402
from models import config_of, offsets, space_of  # noqa: E402
from infrarsi.run import searchers as registry  # noqa: E402
from infrarsi.run.problem import MemorySavers, Outcome, Problem  # noqa: E402
from infrarsi.run.problem_build import patch_speeds, run_to_run_var, savers  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "searchers.json"
BUDGETS = (5, 10, 15, 20, 30, 40, 50, 60)
OOM_FRACTION = 0.3


def problem_of(table: tables.Table, capacity: float) -> tuple[Problem, dict]:
    """The table as a search problem, and the map from config to cell."""
    cells = list(table.cells.values())
    configs = [config_of(c) for c in cells]
    by_config = dict(zip(configs, cells))
    manifest = _manifest(table.workload)
    log_offsets = offsets(cells)
    analytic = None
    if log_offsets is not None:
        lookup = dict(zip(configs, log_offsets))
        analytic = lambda cs: np.array([lookup[c] for c in cs])  # noqa: E731
    known = manifest is not None
    problem = Problem(configs, space_of(table), config_of(table.cells[table.baseline]),
                      capacity_bytes=capacity, analytic_log_peak=analytic,
                      patch_log_speed=patch_speeds(manifest) if known else {},
                      savers=savers(manifest) if known else MemorySavers(),
                      noise_var_log=run_to_run_var(tables.noise_cv(table)))
    return problem, by_config


def _manifest(workload: str):
    from infrarsi.workloads import find
    try:
        return find(workload)
    except Exception:  # a table of a workload this checkout does not ship
        return None


def oom_cost_ratio(table: tables.Table) -> float:
    """Cost of a real OOM trial over the cell's ok cost, from the capped validation rows."""
    ratios = [float(r["cost_s"]) / table.cells[r["cell"]].mean_cost_s for r in table.validation
              if r["status"] == "oom" and r["cell"] in table.cells and
              table.cells[r["cell"]].mean_cost_s]
    return statistics.median(ratios) if ratios else 0.6


class Oracle:
    """Answers a replayed trial from the table (common random numbers per seed and visit)."""

    def __init__(self, by_config, capacity, oom_ratio, seed):
        self.by_config, self.capacity, self.oom_ratio = by_config, capacity, oom_ratio
        self.seed, self.visits = seed, {}

    def run(self, config) -> Outcome:
        cell = self.by_config[config]
        visit = self.visits[config] = self.visits.get(config, 0) + 1
        rng = np.random.default_rng([self.seed, int(cell.cell[1:]), visit])
        if not cell.ok:
            return Outcome(status=next(s for s in cell.status if s != "ok"),
                           cost_s=cell.mean_cost_s)
        if cell.peak_bytes and cell.peak_bytes > self.capacity:
            return Outcome("oom", cost_s=cell.mean_cost_s * self.oom_ratio,
                           cap_bytes=self.capacity)
        r = int(rng.integers(len(cell.step_time_s)))
        return Outcome("ok", step_time_s=cell.step_time_s[r],
                       peak_bytes=cell.peak_mem_bytes[min(r, len(cell.peak_mem_bytes) - 1)],
                       cost_s=cell.cost_s[min(r, len(cell.cost_s) - 1)])


def replay(name, problem, by_config, capacity, oom_ratio, seed, budget) -> dict:
    """One searcher, one seed: the recommended speed-up, OOMs and cost after each trial."""
    searcher = registry.make(name, problem, seed)
    oracle = Oracle(by_config, capacity, oom_ratio, seed)
    base = by_config[problem.baseline].mean_step_time_s
    trace = {"speedup": [], "oom": [], "cost_s": []}
    ooms, cost = 0, 0.0
    for _ in range(budget):
        config = searcher.ask()
        if config is None:
            break
        outcome = oracle.run(config)
        searcher.tell(config, outcome)
        ooms += outcome.status == "oom"
        cost += outcome.cost_s
        rec = searcher.recommend()
        speed = base / by_config[rec].mean_step_time_s if rec is not None else 1.0
        trace["speedup"].append(speed)
        trace["oom"].append(ooms)
        trace["cost_s"].append(cost)
    for key in trace:  # a searcher that ran out of candidates keeps its last answer
        trace[key] += [trace[key][-1]] * (budget - len(trace[key])) if trace[key] else []
    return trace


def summarise(traces: list[dict], best: float, budgets, budget_cap) -> dict:
    """Medians and IQRs over seeds of one searcher's traces on one table."""
    def at(key, b):
        return [t[key][b - 1] for t in traces if len(t[key]) >= b]
    to95 = [next((i + 1 for i, s in enumerate(t["speedup"]) if s >= 0.95 * best), budget_cap)
            for t in traces]
    costs = sorted({c for t in traces for c in t["cost_s"]})
    cost_grid = np.quantile(costs, [0.1, 0.25, 0.5, 0.75]).tolist() if costs else []
    return {
        "best_speedup_median": {str(b): statistics.median(at("speedup", b)) for b in budgets},
        "best_speedup_iqr": {str(b): _iqr(at("speedup", b)) for b in budgets},
        "speedup_vs_cost_s": {f"{c:.0f}": statistics.median(
            max([s for s, cc in zip(t["speedup"], t["cost_s"]) if cc <= c], default=1.0)
            for t in traces) for c in cost_grid},
        "trials_to_95_median": statistics.median(to95),
        "trials_to_95": to95,
        "oom_trials_median": statistics.median(at("oom", budget_cap)),
        "oom_trials_to_95_median": statistics.median(
            t["oom"][min(n, len(t["oom"])) - 1] for t, n in zip(traces, to95)),
        "cost_s_median": statistics.median(at("cost_s", budget_cap)),
    }


def _iqr(values):
    q = np.quantile(values, [0.25, 0.75])
    return [float(q[0]), float(q[1])]


def paired_tests(per_searcher: dict) -> dict:
    """Wilcoxon signed-rank of InfraRSI's trials-to-95% against each peer's, paired by seed."""
    ours = per_searcher.get("infrarsi", {}).get("trials_to_95")
    out = {}
    for name, result in per_searcher.items():
        if name == "infrarsi" or ours is None or "trials_to_95" not in result:
            continue
        diff = np.array(result["trials_to_95"]) - np.array(ours)
        p = float(stats.wilcoxon(diff).pvalue) if np.any(diff != 0) else 1.0
        out[name] = {"median_difference": float(np.median(diff)), "p_value": p}
    return out


def bench_table(table, names, seeds, budgets) -> dict:
    """Every searcher over every seed on one table."""
    capacity = table.capacity_for(OOM_FRACTION)
    problem, by_config = problem_of(table, capacity)
    base = table.cells[table.baseline].mean_step_time_s
    feasible = table.feasible(capacity)
    best = max(base / c.mean_step_time_s for c in feasible)
    ratio = oom_cost_ratio(table)
    per = {}
    for name in names:
        t0 = time.perf_counter()
        traces = [replay(name, problem, by_config, capacity, ratio, seed, max(budgets))
                  for seed in range(seeds)]
        per[name] = summarise(traces, best, budgets, max(budgets))
        print(f"  {table.name} {name:8s} trials to 95%: {per[name]['trials_to_95_median']:>5} "
              f"OOMs: {per[name]['oom_trials_median']:>4}  speed-up at "
              f"{max(budgets)}: {per[name]['best_speedup_median'][str(max(budgets))]:.3f}  "
              f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    oom_share = 1 - len(feasible) / max(1, len([c for c in table.cells.values() if c.ok]))
    return {"searchers": per, "tests": paired_tests(per),
            "table": {"capacity_bytes": capacity, "oom_share": oom_share,
                      "best_speedup": best, "cells": len(table.cells),
                      "oom_cost_ratio": ratio}}


def plot(results: dict, path: Path) -> None:
    """Per table: the median speed-up of the recommended config (IQR shaded) vs trials, and
    the median best speed-up recommended so far vs wall cost spent."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(results)
    fig, axes = plt.subplots(2, len(names), figsize=(4.5 * len(names), 7.0), squeeze=False)
    for col, name in enumerate(names):
        top, bottom = axes[0][col], axes[1][col]
        for searcher, res in results[name]["searchers"].items():
            xs = [int(b) for b in res["best_speedup_median"]]
            line, = top.plot(xs, list(res["best_speedup_median"].values()), marker="o",
                             label=searcher)
            iqr = res.get("best_speedup_iqr")
            if iqr:
                top.fill_between(xs, [iqr[str(b)][0] for b in xs], [iqr[str(b)][1] for b in xs],
                                 color=line.get_color(), alpha=0.12)
            by_cost = res.get("speedup_vs_cost_s") or {}
            if by_cost:
                bottom.plot([float(c) for c in by_cost], list(by_cost.values()), marker="o",
                            color=line.get_color(), label=searcher)
        top.set_title(name, fontsize=8)
        top.set_xlabel("trials")
        top.set_ylabel("speed-up of the recommended config (x)")
        bottom.set_xlabel("wall cost spent (s)")
        bottom.set_ylabel("best speed-up recommended so far (x)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def merge(path: Path, new: dict) -> dict:
    """The results file with what was just replayed merged in (``tables.merge_results``), the
    paired tests computed again on the merged per-seed results."""
    return tables.merge_results(path, new, paired_tests)


def _bench_one(path, names, seeds, budgets):
    table = tables.load(path)
    return table, bench_table(table, names, seeds, budgets)


def _bench_all(paths, names, seeds, budgets, jobs: int):
    """(table, detail) per table path, in order; ``jobs`` > 1 replays tables in parallel."""
    if jobs <= 1 or len(paths) < 2:
        return [_bench_one(p, names, seeds, budgets) for p in paths]
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_bench_one, p, names, seeds, budgets) for p in paths]
        return [f.result() for f in futures]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a reduced version, under a minute")
    parser.add_argument("--table", action="append", help="a table CSV (default: bench/data)")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--searchers", default=",".join(registry.SEARCHERS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--jobs", type=int, default=1,
                        help="tables replayed at once, one process each (replays are not timed)")
    parser.add_argument("--replot", action="store_true",
                        help="only draw the plot again from the results file")
    args = parser.parse_args(argv)
    if args.replot:
        _plot_file(args.out)
        return 0
    paths = tables.table_paths(args.table)
    if not paths:
        parser.error("no table: measure one with bench/make_table.py or give --table PATH")
    names = [n for n in args.searchers.split(",") if n]
    seeds = args.seeds or (3 if args.quick else 50)
    budgets = (5, 10, 15) if args.quick else BUDGETS
    if args.quick and not args.table:
        paths = paths[:1]
    out = {"results": {}, "settings": {"seeds": seeds, "budgets": budgets,
                                       "oom_fraction": OOM_FRACTION}}
    for table, detail in _bench_all(paths, names, seeds, budgets, args.jobs):
        out["results"][table.name] = detail["searchers"]
        out.setdefault("details", {})[table.name] = {"tests": detail["tests"],
                                                     "table": detail["table"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out = merge(args.out, out)
    args.out.write_text(json.dumps(out, indent=1))
    _plot_file(args.out)
    print(f"-> {args.out}")
    return 0


def _plot_file(path: Path) -> None:
    """The plot beside a results file (``searchers.png`` for ``searchers.json``)."""
    out = json.loads(path.read_text())
    try:
        plot({n: {"searchers": out["results"][n]} for n in out["results"]},
             path.with_suffix(".png"))
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
