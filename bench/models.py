"""How well the Run stage's models predict held-out cells of the measured tables.

    .venv/bin/python bench/models.py              # every committed table, 40 splits
    .venv/bin/python bench/models.py --quick      # under a minute
    .venv/bin/python bench/models.py --quick --formula-alone --out F  # the formula alone competing
    .venv/bin/python bench/models.py --table some/other-table.csv

For each table, many random train/test splits of its cells with 10, 20 and 40 training trials,
at capacities where 20, 30 and 40% of the cells are OOM. A training trial is one of its cell's
repeats drawn at random (real noise); by the replay rule it is OOM — right-censored at the
capacity — when its peak is above the capacity. Held-out cells are OOM when their peak (the
largest over repeats) is above it. P(OOM) methods:

- ``censored``: the Tobit model with the analytic estimate as offset (ours);
- ``drop_oom``: the same regression, OOM trials left out;
- ``impute_cap``: the same regression, an OOM trial's peak taken to be the capacity;
- ``classifier``: logistic regression on OOM yes/no (the analytic estimate as a feature);
- ``analytic``: the analytic estimate alone (log-normal with a fixed 10% spread).

``results[TABLE][METHOD]`` holds Brier score, accuracy and mean log-likelihood averaged over the
20- and 40-trial splits (``by_trials`` has each size); memory error is the median relative error
of the predicted peak on feasible held-out cells; ``calibration`` bins the censored model's
P(OOM); ``step_time`` is the Spearman rank correlation of each family on feasible held-out
cells; ``timing.fit_predict_s`` is one fit of the memory, step-time (GP, the family InfraRSI
uses) and cost models on 200
trials plus their predictions for 10,000 candidates.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from scipy import special, stats

sys.path.insert(0, str(Path(__file__).parent))

import tables  # noqa: E402

from infrarsi.run import memory  # noqa: E402
from infrarsi.run.cost import TrialCostModel  # noqa: E402
from infrarsi.run.memory import MemoryObservation, TobitMemoryModel  # noqa: E402
from infrarsi.run.space import Config, Space  # noqa: E402
from infrarsi.run.steptime import FAMILIES, StepTimeModel  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "models.json"
METHODS = ("censored", "drop_oom", "impute_cap", "classifier", "analytic")
ANALYTIC_SPREAD = 0.10
EPS = 1e-4


def space_of(table: tables.Table) -> Space:
    """The table's space: knobs that vary across its cells, and every patch seen."""
    levels = {k: sorted({c.knobs[k] for c in table.cells.values()}) for k in table.knob_names}
    levels = {k: v for k, v in levels.items() if len(v) > 1}
    patches = sorted({p for c in table.cells.values() for p in c.patches})
    return Space.from_levels(levels, patches)


def inferred_derived(table: tables.Table) -> tuple[str, ...]:
    """The knobs of a full-factorial table that follow the others (accumulation steps derived
    from the micro-batch and the ranks): a varying knob whose value is the same in every pair
    of cells that agree on the other knobs not found derived and on the patches. What a table
    of a workload this checkout does not ship says of itself, in place of its manifest's
    ``derive``. Columns are tried last first (a derived column follows those it derives from,
    so of two knobs that determine each other the later one is derived); a sampled table
    says nothing (its cells rarely share the other knobs)."""
    if table.design != "full_factorial":
        return ()
    cells = list(table.cells.values())
    varying = [k for k in table.knob_names if len({c.knobs[k] for c in cells}) > 1]
    derived: list[str] = []
    for k in reversed(varying):
        rest = [o for o in varying if o != k and o not in derived]
        seen: dict[tuple, str] = {}
        if all(
            seen.setdefault((tuple(c.knobs[o] for o in rest), c.patches), c.knobs[k]) == c.knobs[k]
            for c in cells
        ):
            derived.append(k)
    return tuple(reversed(derived))


def config_of(cell: tables.Cell) -> Config:
    """A table cell as a search-space config."""
    return Config.of(cell.knobs, cell.patches)


def offsets(cells: list[tables.Cell]) -> np.ndarray | None:
    """log of the analytic estimate and of the patch prior, as two offset parts per cell (as
    the Run stage gives them), or None when the table has none."""
    if any(c.analytic_peak_bytes is None for c in cells):
        return None
    return np.log([[c.analytic_peak_bytes, c.patch_mem_ratio] for c in cells])


def total(parts: np.ndarray | None) -> np.ndarray | None:
    """The log analytic peak: offset parts added up."""
    return None if parts is None else parts.sum(axis=1)


def p_oom_all(train, test, Xtr, Xte, otr, ote, peaks, capacity) -> dict[str, np.ndarray]:
    """Every method's P(OOM) for the test cells, trained on the given training trials."""
    censored = peaks > capacity
    obs = [MemoryObservation(min(p, capacity), bool(c)) for p, c in zip(peaks, censored)]
    out = {"censored": TobitMemoryModel().fit(Xtr, obs, otr).p_oom(Xte, capacity, ote)}
    keep = ~censored
    kept = [o for o, k in zip(obs, keep) if k]
    out["drop_oom"] = (
        TobitMemoryModel()
        .fit(Xtr[keep], kept, None if otr is None else otr[keep])
        .p_oom(Xte, capacity, ote)
    )
    imputed = [MemoryObservation(o.peak_or_cap_bytes, False) for o in obs]
    out["impute_cap"] = TobitMemoryModel().fit(Xtr, imputed, otr).p_oom(Xte, capacity, ote)
    out["classifier"] = _classifier(Xtr, Xte, total(otr), total(ote), censored, capacity)
    if ote is not None:
        out["analytic"] = special.ndtr((total(ote) - math.log(capacity)) / ANALYTIC_SPREAD)
    return out


def _classifier(Xtr, Xte, otr, ote, y, capacity) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression

    if y.all() or not y.any():
        return np.full(len(Xte), (y.sum() + 0.5) / (len(y) + 1.0))

    def feats(X, o):
        if o is None:
            return X
        return np.hstack([X, (o - math.log(capacity))[:, None] / ANALYTIC_SPREAD])

    model = LogisticRegression(C=1.0, max_iter=1000).fit(feats(Xtr, otr), y)
    return model.predict_proba(feats(Xte, ote))[:, 1]


def scores(p: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Brier score, accuracy and mean log-likelihood of P(OOM) against what happened."""
    q = np.clip(p, EPS, 1 - EPS)
    return {
        "brier": float(np.mean((p - truth) ** 2)),
        "accuracy": float(np.mean((p > 0.5) == truth)),
        "loglik": float(np.mean(np.where(truth, np.log(q), np.log(1 - q)))),
    }


def evaluate_table(table: tables.Table, sizes, fractions, splits, seed) -> dict:
    """Every method's scores on one table, averaged over splits and capacities."""
    space = space_of(table)
    cells = [c for c in table.cells.values() if c.ok and c.peak_bytes]
    X = space.encode([config_of(c) for c in cells])
    off = offsets(cells)
    truth_peak = np.array([c.peak_bytes for c in cells])
    rng = random.Random(seed)
    by_n: dict[int, dict[str, list]] = {}
    mem_err: dict[int, dict[str, list]] = {}
    spearman: dict[int, dict[str, list]] = {}
    calib = []
    for n in sizes:
        if n >= len(cells):
            continue
        acc = by_n.setdefault(n, {m: [] for m in METHODS})
        err = mem_err.setdefault(n, {m: [] for m in ("censored", "drop_oom", "impute_cap")})
        rho = spearman.setdefault(n, {f: [] for f in FAMILIES})
        for _ in range(splits):
            idx = rng.sample(range(len(cells)), n)
            rest = [i for i in range(len(cells)) if i not in set(idx)]
            peaks = np.array([rng.choice(cells[i].peak_mem_bytes) for i in idx])
            otr, ote = (None, None) if off is None else (off[idx], off[rest])
            for fraction in fractions:
                capacity = table.capacity_for(fraction)
                truth = truth_peak[rest] > capacity
                probs = p_oom_all(idx, rest, X[idx], X[rest], otr, ote, peaks, capacity)
                for method, p in probs.items():
                    acc[method].append(scores(p, truth))
                calib += list(zip(probs["censored"], truth))
                _memory_errors(err, X, (idx, rest, otr, ote), peaks, capacity, truth_peak)
            _step_time_ranks(rho, cells, X, idx, rest, rng)
    return {
        "by_trials": {str(n): _mean_scores(v) for n, v in by_n.items()},
        "memory_rel_error": {
            str(n): {m: _median(v) for m, v in e.items()} for n, e in mem_err.items()
        },
        "step_time_spearman": {
            str(n): {f: _median(v) for f, v in r.items()} for n, r in spearman.items()
        },
        "calibration": _calibration(calib),
    }


def _memory_errors(err, X, split, peaks, capacity, truth_peak) -> None:
    """Each memory model's median relative error on the feasible held-out cells; ``split``:
    (training indices, held-out indices, their offsets)."""
    idx, rest, otr, ote = split
    censored = peaks > capacity
    obs = [MemoryObservation(min(p, capacity), bool(c)) for p, c in zip(peaks, censored)]
    feasible = [j for j, i in enumerate(rest) if truth_peak[i] <= capacity]
    if not feasible:
        return
    keep = ~censored
    variants = {
        "censored": (X[idx], obs, otr),
        "drop_oom": (
            X[idx][keep],
            [o for o, k in zip(obs, keep) if k],
            None if otr is None else otr[keep],
        ),
        "impute_cap": (X[idx], [MemoryObservation(o.peak_or_cap_bytes, False) for o in obs], otr),
    }
    Xf = X[rest][feasible]
    of = None if ote is None else ote[feasible]
    actual = truth_peak[rest][feasible]
    for method, (Xt, ob, ot) in variants.items():
        predicted = TobitMemoryModel().fit(Xt, ob, ot).predict_peak_bytes(Xf, of)
        err[method].append(float(np.median(np.abs(predicted - actual) / actual)))


def _step_time_ranks(rho, cells, X, idx, rest, rng) -> None:
    train = [i for i in idx if cells[i].step_time_s]
    test = [i for i in rest if cells[i].step_time_s]
    times = np.array([rng.choice(cells[i].step_time_s) for i in train])
    truth = np.array([cells[i].mean_step_time_s for i in test])
    for family in FAMILIES:
        model = StepTimeModel(family).fit(X[train], times)
        rho[family].append(
            float(stats.spearmanr(model.predict_step_time_s(X[test]), truth).statistic)
        )


def _mean_scores(per_method: dict[str, list[dict]]) -> dict:
    return {
        m: {k: statistics.fmean(s[k] for s in v) for k in v[0]} for m, v in per_method.items() if v
    }


def _median(values: list[float]) -> float | None:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else None


def _calibration(pairs, bins=5) -> list[dict]:
    out = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        inside = [t for p, t in pairs if lo <= p < hi or (b == bins - 1 and p == 1.0)]
        if inside:
            mean_p = statistics.fmean(
                p for p, _ in pairs if lo <= p < hi or (b == bins - 1 and p == 1.0)
            )
            out.append(
                {
                    "bin": f"{lo:.1f}-{hi:.1f}",
                    "n": len(inside),
                    "mean_p_oom": round(mean_p, 3),
                    "observed_oom": round(statistics.fmean(inside), 3),
                }
            )
    return out


def headline(result: dict, sizes=("20", "40")) -> dict:
    """Per method: the scores averaged over the 20- and 40-trial splits."""
    present = [result["by_trials"][s] for s in sizes if s in result["by_trials"]]
    if not present:
        return {}
    return {
        m: {
            k: statistics.fmean(p[m][k] for p in present if m in p)
            for k in ("brier", "accuracy", "loglik")
        }
        for m in present[0]
    }


def timing(table: tables.Table, n_trials=200, n_candidates=10_000, seed=0) -> dict:
    """Seconds to fit the models on ``n_trials`` and predict ``n_candidates`` configs."""
    rng = np.random.default_rng(seed)
    space = space_of(table)
    cells = [c for c in table.cells.values() if c.ok and c.peak_bytes]
    picks = rng.integers(0, len(cells), n_trials)
    X = space.encode([config_of(cells[i]) for i in picks])
    peaks = np.array([cells[i].peak_bytes for i in picks]) * rng.lognormal(0, 0.02, n_trials)
    capacity = table.capacity_for(0.3)
    obs = [MemoryObservation(min(p, capacity), p > capacity) for p in peaks]
    times = np.array([cells[i].mean_step_time_s for i in picks])
    cand = space.encode([_random_config(space, rng) for _ in range(n_candidates)])
    out = {}
    for family in FAMILIES:
        t0 = time.perf_counter()
        memory = TobitMemoryModel().fit(X, obs)
        p = memory.p_oom(cand, capacity)
        StepTimeModel(family).fit(X, times).predict_log(cand)
        TrialCostModel().fit(X, np.full(n_trials, 5.0), peaks > capacity).predict_cost_s(cand, p)
        out[family] = time.perf_counter() - t0
    return out


def _random_config(space: Space, rng) -> Config:
    knobs = {d.name: d.levels[rng.integers(len(d.levels))] for d in space.dims}
    return Config.of(knobs, [p for p in space.patches if rng.random() < 0.5])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a reduced run, under a minute")
    parser.add_argument("--table", action="append", help="a table CSV (default: bench/data)")
    parser.add_argument("--splits", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--formula-alone",
        action="store_true",
        help="let the analytic formula alone compete with the censored fits by evidence "
        "(the memory model's FORMULA_ALONE; off in the product)",
    )
    args = parser.parse_args(argv)
    if args.formula_alone:
        memory.FORMULA_ALONE = True
    paths = tables.table_paths(args.table)
    if not paths:
        parser.error("no table: measure one with bench/make_table.py or give --table PATH")
    sizes, fractions = ((20, 40), (0.3,)) if args.quick else ((10, 20, 40), (0.2, 0.3, 0.4))
    splits = args.splits or (4 if args.quick else 40)
    out = {
        "results": {},
        "details": {},
        "noise": {},
        "timing": {},
        "settings": {"sizes": sizes, "oom_fractions": fractions, "splits": splits},
    }
    for path in paths:
        table = tables.load(path)
        t0 = time.perf_counter()
        detail = evaluate_table(table, sizes, fractions, splits, args.seed)
        out["results"][table.name] = headline(detail)
        out["details"][table.name] = detail
        out["noise"][table.name] = {
            "step_time_cv_median": tables.noise_cv(table),
            "cells": len(table.cells),
        }
        print(f"{table.name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        _print(table.name, out["results"][table.name], detail)
    per_family = timing(tables.load(paths[0]))
    out["timing"] = {
        "fit_predict_s": per_family["gp"],
        "fit_predict_s_by_family": per_family,
        "trials": 200,
        "candidates": 10_000,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out = tables.merge_results(args.out, out)
    args.out.write_text(json.dumps(out, indent=1))
    print(f"timing: {per_family}  -> {args.out}")
    return 0


def _print(name: str, result: dict, detail: dict) -> None:
    print(f"\n{name}")
    for n, methods in detail["by_trials"].items():
        line = "  ".join(
            f"{m} {s['brier']:.3f}/{s['accuracy']:.2f}/{s['loglik']:.2f}"
            for m, s in methods.items()
        )
        print(f"  n={n:>2} brier/acc/loglik  {line}")
    print(f"  memory rel. error: {detail['memory_rel_error']}")
    print(f"  step-time spearman: {detail['step_time_spearman']}")


if __name__ == "__main__":
    sys.exit(main())
