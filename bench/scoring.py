"""How the search benchmark scores searchers: the target set, normalised regret, trials to the
target, the paired tests and the ranks over tables — pure functions, the rules frozen in
``bench/constants.json`` (``scoring``).

- **Target set**: the feasible cells whose true mean log step time is within
  max(``TARGET_SE`` standard errors of the best cell's mean, log(1 + ``TARGET_MIN_GAP``)) of the
  best *and* faster than the baseline (when the baseline fits): a cell a re-measure cannot tell
  from the best, never one that merely has a wide interval.
- **Normalised regret** of a recommendation: (t_rec - t_best) / (t_base - t_best) on true means
  (the slowest feasible cell stands in for the baseline where the baseline does not fit);
  nothing recommended yet is 1.
- **Trials to target**: the first trial from which the recommendation stays in the target set
  to the end of the budget (a lucky visit that is lost again does not count).
- **Budgets** are percentages of the table's cells (``BUDGET_PCTS``), the largest the run's
  budget.
- **Per table**: each peer against InfraRSI, the per-seed area under the normalised-regret
  curve paired by seed, a two-sided Wilcoxon signed-rank test, Holm-corrected over the peers,
  with the matched-pairs rank-biserial correlation (positive: the peer's regret is higher) and
  a bootstrap interval of the median paired difference.
- **Informative**: a table where the baseline is within the target width of the best has
  nothing to find, and one every searcher solves by its second trial tells none apart: both
  are reported apart.
- **Over tables**: each searcher's average rank on the informative tables (rank 1 the lowest
  mean area) and Nemenyi's critical difference at 5%.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

TARGET_SE = 2.0
TARGET_MIN_GAP = 0.03
BUDGET_PCTS = (5, 10, 25)
UNINFORMATIVE_TRIALS = 2  # a table every searcher solves by this trial tells none apart
N_BOOT = 2000
ALPHA = 0.05


def budget_trials(cells: int, pct: float) -> int:
    """Trials a budget of ``pct`` percent of a table's ``cells`` allows (at least one)."""
    return max(1, math.ceil(pct / 100.0 * cells - 1e-9))


def target_width(se_best: float) -> float:
    """How far above the best's log time a cell may be and still be in the target set."""
    return max(TARGET_SE * se_best, math.log1p(TARGET_MIN_GAP))


def target_set(
    true_log: dict, se_log: dict, feasible: set, baseline: object | None
) -> tuple[set, object]:
    """(the target set, the best cell) by the rule above; ``baseline`` None when it does not
    fit."""
    best = min(feasible, key=lambda c: true_log[c])
    width = target_width(se_log.get(best, 0.0))
    base_log = true_log[baseline] if baseline in feasible else math.inf
    target = {
        c
        for c in feasible
        if true_log[c] - true_log[best] <= width and (true_log[c] < base_log or c == best)
    }
    return target, best


def normalised_regret(t_rec: float | None, t_best: float, t_base: float) -> float:
    """(t_rec - t_best) / (t_base - t_best); 1 when nothing is recommended."""
    if t_rec is None:
        return 1.0
    span = t_base - t_best
    if span <= 0:
        return 0.0 if t_rec <= t_best else 1.0
    return (t_rec - t_best) / span


def trials_to_target(in_target: Sequence[bool]) -> int | None:
    """The first trial (1-based) from which every later trial's recommendation is in the
    target set; None when the last one is not."""
    if not in_target or not in_target[-1]:
        return None
    n = len(in_target)
    while n > 1 and in_target[n - 2]:
        n -= 1
    return n


def area(curve: Sequence[float]) -> float:
    """The mean of an anytime curve over its trials (the area under it, per trial)."""
    return float(np.mean(curve)) if len(curve) else math.nan


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjustment of a family of p-values."""
    order = sorted(p_values, key=p_values.get)
    m, running, out = len(order), 0.0, {}
    for i, name in enumerate(order):
        running = max(running, min(1.0, (m - i) * p_values[name]))
        out[name] = running
    return out


def rank_biserial(diff: np.ndarray) -> float:
    """Matched-pairs rank-biserial correlation of paired differences (zeros dropped):
    (sum of positive ranks - sum of negative ranks) / total; in [-1, 1]."""
    d = diff[diff != 0]
    if not len(d):
        return 0.0
    ranks = stats.rankdata(np.abs(d))
    return float((ranks[d > 0].sum() - ranks[d < 0].sum()) / ranks.sum())


def boot_median_interval(values: np.ndarray, seed: int = 0) -> list[float]:
    """95% percentile-bootstrap interval of a median."""
    x = np.asarray(values, dtype=float)
    if not len(x):
        return [math.nan, math.nan]
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, len(x), size=(N_BOOT, len(x)))], axis=1)
    lo, hi = np.quantile(medians, [0.025, 0.975])
    return [float(lo), float(hi)]


def paired_tests(
    scores: dict[str, np.ndarray], ours: str = "infrarsi", apart: frozenset[str] = frozenset()
) -> dict:
    """Per peer: the two-sided paired Wilcoxon test of its per-seed scores against ``ours``
    (paired by seed index), Holm-corrected over the peers, the median difference (peer minus
    ours: positive when the peer's regret is higher) with its interval and the rank-biserial
    effect size. The names in ``apart`` (InfraRSI's ablations: not peers) are tested the same
    way and Holm-corrected in a family of their own, so they never widen the peers'."""
    if ours not in scores:
        return {}
    raw, out = {}, {}
    for name, theirs in scores.items():
        if name == ours:
            continue
        n = min(len(theirs), len(scores[ours]))
        diff = np.asarray(theirs[:n]) - np.asarray(scores[ours][:n])
        p = (
            float(stats.wilcoxon(diff, alternative="two-sided").pvalue)
            if np.any(diff != 0)
            else 1.0
        )
        raw[name] = p
        out[name] = {
            "seeds": n,
            "median_difference": float(np.median(diff)) if n else math.nan,
            "median_difference_ci95": boot_median_interval(diff),
            "rank_biserial": rank_biserial(diff),
            "p_value": p,
        }
    families = (
        {n: p for n, p in raw.items() if n not in apart},
        {n: p for n, p in raw.items() if n in apart},
    )
    adjusted = {name: p for family in families for name, p in holm(family).items()}
    for name, p in adjusted.items():
        out[name]["p_holm"] = p
        out[name]["direction"] = (
            "no difference"
            if p >= ALPHA
            else ("peer worse" if out[name]["median_difference"] > 0 else "peer better")
        )
    return out


def average_ranks(per_table: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each searcher's mean rank over tables (rank 1: the lowest score; ties share the mean
    rank); only searchers present on every table are ranked."""
    names = set.intersection(*(set(v) for v in per_table.values())) if per_table else set()
    names_sorted = sorted(names)
    if not names_sorted:
        return {}
    ranks = np.array(
        [stats.rankdata([scores[n] for n in names_sorted]) for scores in per_table.values()]
    )
    return {n: float(r) for n, r in zip(names_sorted, ranks.mean(axis=0))}


def critical_difference(k: int, n_tables: int, alpha: float = ALPHA) -> float | None:
    """Nemenyi's critical difference of average ranks for ``k`` searchers over ``n_tables``
    tables (None with fewer than two of either)."""
    if k < 2 or n_tables < 2:
        return None
    q = stats.studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2)
    return float(q * math.sqrt(k * (k + 1) / (6.0 * n_tables)))


def informative(
    trials_to_target_medians: dict[str, float | None], something_to_find: bool = True
) -> bool:
    """Whether a table tells searchers apart: there is something to find (the baseline is
    not within the target width of the best) and not every searcher reached the target by
    trial ``UNINFORMATIVE_TRIALS`` (median over seeds)."""
    return something_to_find and not all(
        t is not None and t <= UNINFORMATIVE_TRIALS for t in trials_to_target_medians.values()
    )
