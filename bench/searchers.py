"""Replay every searcher on the measured tables: how fast each finds a config as fast as the best.

    .venv/bin/python bench/searchers.py            # every table, 30 seeds, 40 trials
    .venv/bin/python bench/searchers.py --quick    # a reduced version, a few minutes
    .venv/bin/python bench/searchers.py --table other.csv --out other.json
    .venv/bin/python bench/searchers.py --replot   # the plot again from searchers.json

Each searcher is given what a user of it could give it and replayed on each table at a capacity
where ~30% of the ok cells do not fit (``replay.py``: the problem, the oracle, the target set,
the two recommendation rules). Per table and searcher, over seeds: the simple regret of the
recommended config (``remeasure`` rule; the ``own`` rule beside it) at 10, 20 and 40 trials
with bootstrap intervals of the median, trials and wall cost to recommend a cell of the target
set (the cells not distinguishable from the best) and the share of seeds that did, OOM trials,
and a paired one-sided Wilcoxon test of each peer's regret against InfraRSI's (the mean of the
three budgets' regrets, per seed). A table's ``design`` says whether every cell a searcher may
ask for was measured (``full_factorial``) or a random sample of a larger space (``sampled``,
where a peer's proposal may land on a nearest cell; ``snapped_median`` counts those).

The searchers' constants are frozen in the code; ``constants`` in the results file says which
tables chose them, so a table not among them is a held-out test.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # small models: a second thread only spins (see run.space)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

import tables  # noqa: E402
from replay import ABLATIONS, OOM_FRACTION, PEERS, replay, setting_of  # noqa: E402

from infrarsi.run import searchers as registry  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "searchers.json"
CHECKPOINTS = (10, 20, 40)
SLOW_REPLAYS = ("gp", "smac", *ABLATIONS)  # replayed on the first --few-seeds seeds
N_BOOT = 2000
# the tables the searchers' constants were chosen on (replayed while tuning them); any other
# table is held out
TUNED_ON = (
    "dense-1node-fb737a3983921667",
    "dense-2node-fb737a3983921667",
    "moe-1node-fb737a3983921667",
    "moe-2node-fb737a3983921667",
)
CONSTANTS = (
    "infrarsi_searcher: N_SEEDS, RERUN_EVERY, FIRM_TOP, P_OOM_MAX, PAIR_RISK, "
    "PAIR_SAFE, STOP_EFFECT_MAX, PRIOR_SHRINK, PRIOR_DROP_EVIDENCE; "
    "SLOW_MIN, SLOW_Z, PATCH_FADE_MIN, MEASURED_SLOW set a priori, on no table"
)


def _finite(values: list[float]) -> list[float]:
    """Regrets for statistics: an infinite one (nothing feasible found where the baseline does
    not fit) ranks worse than any finite one."""
    finite = [v for v in values if math.isfinite(v)]
    worst = (max(finite) if finite else 0.0) + 1.0
    return [v if math.isfinite(v) else worst for v in values]


def _json(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def boot_median(values: list[float], seed: int = 0) -> list[float | None]:
    """95% percentile-bootstrap interval of the median over seeds."""
    x = np.asarray(_finite(values))
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, len(x), size=(N_BOOT, len(x)))], axis=1)
    lo, hi = np.quantile(medians, [0.025, 0.975])
    worst = max(values) if values else None
    return [_json(lo), _json(hi) if worst is None or math.isfinite(worst) or hi < max(x) else None]


def first_in_target(trace: dict, budget: int) -> int | None:
    """The trial after which the recommendation entered the target set (None: never)."""
    return next((i + 1 for i, hit in enumerate(trace["in_target"][:budget]) if hit), None)


def summarise(traces: list[dict], budget: int) -> dict:
    """One searcher on one table, over seeds."""

    def at(key, b):
        return [t[key][min(b, len(t[key])) - 1] for t in traces if t[key]]

    hits = [first_in_target(t, budget) for t in traces]
    reached = [(n, t["cost_s"][n - 1]) for n, t in zip(hits, traces) if n is not None]
    missing = len(traces) - len(reached)
    trials = [n for n, _ in reached] + [math.inf] * missing
    costs = [c for _, c in reached] + [math.inf] * missing
    return {
        "regret_median": {
            str(b): _json(statistics.median(_finite(at("regret", b)))) if at("regret", b) else None
            for b in CHECKPOINTS
        },
        "regret_ci95": {str(b): boot_median(at("regret", b)) for b in CHECKPOINTS},
        "regret_own_rule_median": {
            str(b): _json(statistics.median(_finite(at("regret_own", b)))) for b in CHECKPOINTS
        },
        "trials_to_target_median": _json(statistics.median(trials)),
        "cost_to_target_s_median": _json(statistics.median(costs)),
        "share_reaching_target": len(reached) / len(traces),
        "oom_trials_median": statistics.median(at("oom", budget)),
        "cost_s_median": statistics.median(at("cost_s", budget)),
        "snapped_median": statistics.median(t["snapped"] for t in traces),
        "per_seed": {
            "regret": {str(b): [_json(v) for v in at("regret", b)] for b in CHECKPOINTS},
            "trials_to_target": [_json(v) for v in trials],
            "cost_to_target_s": [_json(v) for v in costs],
        },
    }


def paired_tests(per_searcher: dict) -> dict:
    """Per peer: paired one-sided Wilcoxon signed-rank test that its regret (the mean over the
    checkpoints, per seed) is above InfraRSI's, and the median difference."""

    def score(result):
        per = result["per_seed"]["regret"]
        rows = [_finite([math.inf if v is None else v for v in per[str(b)]]) for b in CHECKPOINTS]
        return np.mean(np.array(rows), axis=0)

    ours = per_searcher.get("infrarsi")
    out = {}
    for name, result in per_searcher.items():
        if name == "infrarsi" or ours is None:
            continue
        mine, theirs = score(ours), score(result)
        n = min(len(mine), len(theirs))  # paired by seed: the seeds both ran
        diff = theirs[:n] - mine[:n]
        p = float(stats.wilcoxon(diff, alternative="greater").pvalue) if np.any(diff != 0) else 1.0
        out[name] = {"median_regret_difference": float(np.median(diff)), "p_value": p}
        result["p_vs_infrarsi"] = p
    return out


def bench_table(table, names, seeds, budget) -> dict:
    """Every searcher over every seed on one table; ``seeds``: (most searchers', the slow
    replays' — ``SLOW_REPLAYS``)."""
    s = setting_of(table, OOM_FRACTION)
    per = {}
    for name in names:
        t0 = time.perf_counter()
        n = seeds[1] if name in SLOW_REPLAYS else seeds[0]
        traces = [replay(name, s, seed, budget) for seed in range(n)]
        per[name] = summarise(traces, budget)
        r = per[name]["regret_median"]
        print(
            f"  {table.name} {name:20s} regret 10/20/40: {r['10']}/{r['20']}/{r['40']}  "
            f"to target: {per[name]['trials_to_target_median']} trials, "
            f"{per[name]['cost_to_target_s_median']} s  OOMs {per[name]['oom_trials_median']}"
            f"  ({time.perf_counter() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    tests = paired_tests(per)
    feasible = table.feasible(s.capacity)
    return {
        "searchers": per,
        "tests": tests,
        "design": table.design,
        "table": {
            "capacity_bytes": s.capacity,
            "cells": len(table.cells),
            "oom_share": 1 - len(feasible) / max(1, len([c for c in table.cells.values() if c.ok])),
            "target_cells": len(s.target),
            "best_speedup": math.exp(
                s.true_log[min(s.target, key=s.true_log.get)] * -1 + s.true_log[_baseline(s)]
            )
            if math.isfinite(s.true_log[_baseline(s)])
            else None,
            "baseline_fits": math.isfinite(s.baseline_regret),
            "oom_cost_ratio": s.oom_ratio,
            "held_out": table.name not in TUNED_ON,
        },
    }


def _baseline(s):
    from models import config_of

    return config_of(s.table.cells[s.table.baseline])


def plot(results: dict, path: Path) -> None:
    """Per table: each searcher's median simple regret (bootstrap 95% interval) at the
    checkpoints, and its median wall cost to reach the target set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, axes = plt.subplots(2, len(names), figsize=(4.5 * len(names), 7.0), squeeze=False)
    for col, name in enumerate(names):
        top, bottom = axes[0][col], axes[1][col]
        per = _searchers_of(results[name])
        for i, (searcher, res) in enumerate(per.items()):
            xs = [int(b) for b in res["regret_median"]]
            ys = [v if v is not None else np.nan for v in res["regret_median"].values()]
            (line,) = top.plot(xs, ys, marker="o", label=searcher)
            ci = res.get("regret_ci95") or {}
            lo = [(ci.get(str(b)) or [None, None])[0] for b in xs]
            hi = [(ci.get(str(b)) or [None, None])[1] for b in xs]
            top.fill_between(
                xs,
                [np.nan if v is None else v for v in lo],
                [np.nan if v is None else v for v in hi],
                color=line.get_color(),
                alpha=0.1,
            )
            cost = res.get("cost_to_target_s_median")
            bottom.bar(
                i,
                cost if cost is not None else 0,
                color=line.get_color(),
                hatch="" if cost is not None else "//",
            )
        top.set_title(f"{name} ({results[name].get('design', 'sampled')})", fontsize=8)
        top.set_xlabel("trials")
        top.set_ylabel("simple regret, log(recommended / best)")
        bottom.set_xticks(range(len(per)), list(per), rotation=60, fontsize=7)
        bottom.set_ylabel("median wall cost to the target set (s); hatched: not reached")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _searchers_of(table_results: dict) -> dict:
    """The searchers' entries of one table's results (its ``design`` left out)."""
    return {k: v for k, v in table_results.items() if isinstance(v, dict)}


def merge(path: Path, new: dict) -> dict:
    """The results file with what was just replayed merged in (``tables.merge_results``), the
    paired tests computed again on the merged per-seed results."""
    return tables.merge_results(path, new, lambda per: paired_tests(_searchers_of(per)))


def _bench_one(path, names, seeds, budget):
    table = tables.load(path)
    return table, bench_table(table, names, seeds, budget)


def _bench_all(paths, names, seeds, budget, jobs: int):
    """(table, detail) per table path as each is done; ``jobs`` > 1 replays tables in
    parallel."""
    if jobs <= 1 or len(paths) < 2:
        for p in paths:
            yield _bench_one(p, names, seeds, budget)
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_bench_one, p, names, seeds, budget) for p in paths]
        for future in as_completed(futures):
            yield future.result()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a reduced version (3 seeds)")
    parser.add_argument("--table", action="append", help="a table CSV (default: bench/data)")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument(
        "--searchers", default=",".join(list(registry.SEARCHERS) + list(PEERS) + list(ABLATIONS))
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="tables replayed at once, one process each (replays are not timed)",
    )
    parser.add_argument(
        "--few-seeds",
        type=int,
        default=None,
        help="seeds for the slow replays — Optuna's GP and SMAC (~1 s and "
        "~0.5 s per ask) and InfraRSI's ablations: the first N seeds, "
        "paired with InfraRSI's same seeds",
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
    known = list(registry.SEARCHERS) + list(PEERS) + list(ABLATIONS)
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"--searchers {','.join(unknown)}: choose among {', '.join(known)}")
    seeds = args.seeds or (3 if args.quick else 30)
    budget = max(CHECKPOINTS)
    out = {
        "results": {},
        "settings": {
            "seeds": seeds,
            "budget": budget,
            "checkpoints": list(CHECKPOINTS),
            "oom_fraction": OOM_FRACTION,
        },
        "constants": {"tuned_on": list(TUNED_ON), "which": CONSTANTS},
    }
    out["settings"]["few_seeds"] = min(args.few_seeds or seeds, seeds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for table, detail in _bench_all(
        paths, names, (seeds, out["settings"]["few_seeds"]), budget, args.jobs
    ):  # each table saved as it is done
        one = dict(
            out,
            results={table.name: {"design": detail["design"], **detail["searchers"]}},
            details={
                table.name: {
                    "tests": detail["tests"],
                    "table": detail["table"],
                    "seeds": seeds,
                    "few_seeds": out["settings"]["few_seeds"],
                }
            },
        )
        merged = merge(args.out, one)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(merged, indent=1))
        tmp.replace(args.out)
    _plot_file(args.out)
    print(f"-> {args.out}")
    return 0


def _plot_file(path: Path) -> None:
    """The plot beside a results file (``searchers.png`` for ``searchers.json``)."""
    out = json.loads(path.read_text())
    try:
        plot(out["results"], path.with_suffix(".png"))
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
