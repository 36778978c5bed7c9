"""Apply's decisions, as pure functions: how many rounds, each candidate's ratio to its
neighbouring baselines, the interval of the speed-up over rounds, and which candidate (if any)
is promoted.

The interval is on the mean log ratio over rounds. It is the wider of two: the expanded
percentile bootstrap (Hesterberg 2015: the percentile level widened so that it matches
``sqrt(n / (n - 1)) * t`` — the plain percentile bootstrap is too narrow with few rounds) and
Student's t interval (a bootstrap cannot reach past its data, so with 5 rounds it alone would
be anti-conservative). The level is corrected for the K candidates compared (Bonferroni): the
promoted one is picked among K, and an A/A candidate must not win by selection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from infrarsi.options import apply_rounds
from infrarsi.units import format_ratio_bound as _b

N_BOOT = 4000
METHOD = (
    "per round, ratio = geometric mean of the baselines before and after / candidate; "
    "interval of the geometric-mean ratio over rounds: the wider of the expanded "
    "percentile bootstrap and Student's t on log ratios, at the contract's confidence, "
    "Bonferroni-corrected for the candidates compared; promote the fastest candidate "
    "whose lower bound is above 1 and which passed every check in every round; after each "
    "round, drop a candidate that failed a check or whose one-sided upper bound (Student's "
    "t on the log ratios, their spread pooled over the candidates, at the confidence "
    "Bonferroni-corrected for one look per round) lies below 1, and end when none is "
    "left"
)


@dataclass(frozen=True)
class Interval:
    """A speed-up (geometric mean of the ratios) and its interval; bounds None with fewer than
    two rounds."""

    speedup: float | None
    low: float | None
    high: float | None
    n: int


def rounds_needed(recommended: int | None) -> int:
    """Rounds to run: the Doctor's recommended repeats, within Apply's bounds
    (``options.apply_rounds``)."""
    return apply_rounds(recommended)


def round_ratios(baseline_s: list[float | None], candidate_s: list[float | None]) -> list[float]:
    """Baseline time over candidate time for each round, the baseline being the geometric mean
    of the baseline measured just before the round and the one just after (``baseline_s`` has
    one more entry than ``candidate_s``: the closing baseline). Rounds where the candidate or
    both neighbouring baselines are missing give no ratio."""
    out = []
    for r, cand in enumerate(candidate_s):
        around = [b for b in baseline_s[r : r + 2] if b is not None and b > 0]
        if cand is None or cand <= 0 or not around:
            continue
        out.append(math.exp(float(np.mean(np.log(around)))) / cand)
    return out


def interval(
    ratios: list[float],
    confidence: float,
    comparisons: int = 1,
    seed: int = 0,
    n_boot: int = N_BOOT,
) -> Interval:
    """The geometric-mean speed-up over rounds with its two-sided interval at ``confidence``,
    Bonferroni-corrected for ``comparisons`` candidates."""
    from scipy import stats  # here: a command that decides nothing starts without scipy

    x = np.log(np.asarray(ratios, dtype=float))
    n = len(x)
    if n == 0:
        return Interval(None, None, None, 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(math.exp(mean), None, None, n)
    alpha = (1 - confidence) / max(1, comparisons)
    t = float(stats.t.ppf(1 - alpha / 2, n - 1))
    se = float(x.std(ddof=1)) / math.sqrt(n)
    lo_t, hi_t = mean - t * se, mean + t * se
    lo_b, hi_b = _expanded_percentile(x, alpha, t, seed, n_boot)
    return Interval(math.exp(mean), math.exp(min(lo_t, lo_b)), math.exp(max(hi_t, hi_b)), n)


def _expanded_percentile(
    x: np.ndarray, alpha: float, t: float, seed: int, n_boot: int
) -> tuple[float, float]:
    from scipy import stats

    n = len(x)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, n, size=(n_boot, n))].mean(axis=1)
    widened = 2 * stats.norm.cdf(-math.sqrt(n / (n - 1)) * t)  # Hesterberg's expanded level
    lo, hi = np.quantile(means, [widened / 2, 1 - widened / 2])
    return float(lo), float(hi)


def futile(
    ratios: list[float], confidence: float, looks: int, pooled: tuple[float, int] | None = None
) -> bool:
    """Whether a candidate can no longer be promoted: the one-sided upper bound of its mean log
    ratio lies below 0 (promotion needs a lower bound above 1). Each look is taken at level
    ``(1 - confidence) / looks`` (Bonferroni over the looks), so the chance of dropping a
    candidate that is in truth at least as fast as the baseline, over every look of a run,
    stays below ``1 - confidence``. ``pooled``: (standard deviation of one round's log ratio,
    its degrees of freedom) pooled over the candidates measured in the same rounds — one
    machine's noise, known sooner from all of them than from one (``pooled_sd``); without
    it, the candidate's own spread. Dropping only ends measurements early: it can never make
    Apply promote what it would not have promoted."""
    from scipy import stats

    n = len(ratios)
    if n < 2:
        return False
    x = np.log(np.asarray(ratios, dtype=float))
    sd, df = pooled if pooled is not None else (float(x.std(ddof=1)), n - 1)
    if df < 1:
        return False
    alpha = (1 - confidence) / max(1, looks)
    high = float(x.mean()) + float(stats.t.ppf(1 - alpha, df)) * sd / math.sqrt(n)
    return high < 0


def pooled_sd(ratio_lists: list[list[float]]) -> tuple[float, int] | None:
    """(pooled standard deviation of the log ratios, degrees of freedom) over the candidates
    with at least two rounds; None when none has."""
    groups = [np.log(np.asarray(r, dtype=float)) for r in ratio_lists if len(r) >= 2]
    df = sum(len(g) - 1 for g in groups)
    if not df:
        return None
    return math.sqrt(sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / df), df


@dataclass(frozen=True)
class Choice:
    """A candidate's evidence as the decision sees it."""

    label: str
    interval: Interval
    verified: bool


def promote(choices: list[Choice]) -> tuple[str | None, str]:
    """The label to promote (or None) and the sentence that says why."""
    eligible = [
        c for c in choices if c.verified and c.interval.low is not None and c.interval.low > 1
    ]
    if eligible:
        best = max(eligible, key=lambda c: c.interval.speedup or 0.0)
        i = best.interval
        return best.label, (
            f"{best.label} promoted: {i.speedup:.3f}x the baseline, interval "
            f"[{_b(i.low)}, {_b(i.high)}] over {i.n} rounds, every check passed "
            "in every round"
        )
    if not choices:
        return None, "no candidate to re-measure: the run has no config that ran ok"
    why = []
    for c in choices:
        i = c.interval
        if not c.verified:
            why.append(f"{c.label} failed a check")
        elif i.low is None:
            why.append(f"{c.label} has fewer than 2 measured rounds")
        else:
            why.append(f"{c.label} {_b(i.speedup)}x [{_b(i.low)}, {_b(i.high)}] over {i.n} rounds")
    return None, "no significant gain: nothing promoted (" + "; ".join(why) + ")"
