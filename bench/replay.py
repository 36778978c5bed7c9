"""One searcher replayed on one measured table: the problem every searcher is given, the oracle
that answers its trials, the target set and the regret of what it would recommend.

**What every searcher is given** — what a user of that tool could give it, and nothing from the
table it is scored on: the candidates (the table's cells), the analytic memory estimate (a
prefilter for any searcher; a prior for InfraRSI's memory model), the start points (the
baseline, and the catalog's pick among the cells the estimate says fit), the knobs that are
derived, and the between-run noise *as the Doctor would measure it*: the spread of
``DOCTOR_RUNS`` draws of the baseline cell's repeats (never the table's spread over all cells).

**The oracle** answers a trial of a cell at the capacity by the replay rule (see
``bench/data/README.md``): ``oom`` (costing the cell's cost times the measured OOM/ok ratio)
when the cell's peak is above the capacity, else one of its repeats drawn at random (common
random numbers: a seed draws the same repeat for the same visit of a cell, whatever the
searcher). A searcher that sets a slow bound (``Searcher.slow_bound``) has a trial whose cost
passes it cut there: told ``slow`` at the bound's censored time, charged the bound.

**Scoring** is by the true means (the mean over a cell's repeats). The *target set* is every
feasible cell not distinguishable from the best — its mean log step time within two standard
errors of the best's. *Simple regret* is ``log(true step time of the recommended cell / best)``;
before any feasible trial nothing is recommended and the regret is the baseline's (infinite
where the baseline does not fit). Two recommendation rules: ``own`` (what the searcher
recommends) and ``remeasure`` — one rule for all: the searcher's top ``TOP_K`` configs, each
measured ``REMEASURE`` more times, the best mean wins (Apply's rule, without its checks).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np
import tables
from models import config_of, offsets, space_of

from infrarsi.run import searchers as registry
from infrarsi.run.problem import MemorySavers, Outcome, Problem
from infrarsi.run.problem_build import patch_speeds, run_to_run_var, savers
from infrarsi.trial.record import TrialStatus

OOM_FRACTION = 0.3
DOCTOR_RUNS = 3
TOP_K = 3
REMEASURE = 2
TARGET_SE = 2.0
PEERS = ("smac",)  # benchmark-only peers, beside the registry's
ABLATIONS = {  # InfraRSI with one idea taken out
    "infrarsi-no-prior": {"prior": False},
    "infrarsi-no-censor": {"censored": False},
    "infrarsi-no-pairing": {"pairing": False},
    "infrarsi-no-cut": {"cut_slow": False},
}


@dataclass
class Setting:
    """A table at a capacity, with its truth: per config the true mean log step time, and the
    target set."""

    table: tables.Table
    capacity: float
    by_config: dict
    oom_ratio: float
    true_log: dict
    target: set
    best_log: float
    baseline_regret: float

    def regret(self, config) -> float:
        """Simple regret of recommending ``config`` (None: nothing found yet)."""
        return self.baseline_regret if config is None else self.true_log[config] - self.best_log


def setting_of(
    table: tables.Table, oom_fraction: float = OOM_FRACTION, capacity: float | None = None
) -> Setting:
    """The table at a capacity where ``oom_fraction`` of the ok cells do not fit — raised to
    the baseline's peak where that would leave the baseline out: a user's job runs at its
    capacity, so the baseline fits (fewer cells then fail; ``oom_share`` says how many).
    ``capacity``: this one instead (a test of a baseline that does not fit)."""
    if capacity is None:
        capacity = table.capacity_for(oom_fraction)
        base_cell = table.cells[table.baseline]
        if base_cell.ok and base_cell.peak_bytes:
            capacity = max(capacity, base_cell.peak_bytes)
    cells = list(table.cells.values())
    by_config = {config_of(c): c for c in cells}
    feasible = {config_of(c) for c in table.feasible(capacity)}
    true_log = {
        cfg: math.log(c.mean_step_time_s) if c.step_time_s else math.inf
        for cfg, c in by_config.items()
    }
    best = min(feasible, key=lambda cfg: true_log[cfg])
    se = {cfg: _se_log(by_config[cfg]) for cfg in feasible}
    target = {
        cfg
        for cfg in feasible
        if true_log[cfg] - true_log[best] <= TARGET_SE * math.hypot(se[cfg], se[best])
    }
    base = config_of(table.cells[table.baseline])
    base_regret = true_log[base] - true_log[best] if base in feasible else math.inf
    return Setting(
        table,
        capacity,
        by_config,
        oom_cost_ratio(table),
        true_log,
        target,
        true_log[best],
        base_regret,
    )


def _se_log(cell) -> float:
    """Standard error of a cell's mean log step time (0 with one repeat)."""
    logs = [math.log(t) for t in cell.step_time_s]
    return statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else 0.0


def oom_cost_ratio(table: tables.Table) -> float:
    """Cost of a real OOM trial over the cell's ok cost, from the capped validation rows."""
    ratios = [
        float(r["cost_s"]) / table.cells[r["cell"]].mean_cost_s
        for r in table.validation
        if r["status"] == TrialStatus.OOM
        and r["cell"] in table.cells
        and table.cells[r["cell"]].mean_cost_s
    ]
    return statistics.median(ratios) if ratios else 0.6


def doctor_noise_var(table: tables.Table, seed: int) -> float:
    """The between-run variance of log time the Doctor would report: ``DOCTOR_RUNS`` draws of
    the baseline cell's repeats."""
    times = table.cells[table.baseline].step_time_s
    if len(times) < 2:
        return run_to_run_var(None)
    rng = np.random.default_rng([seed, 7])
    draws = [times[int(i)] for i in rng.integers(len(times), size=DOCTOR_RUNS)]
    return run_to_run_var(statistics.stdev(draws) / statistics.fmean(draws))


def problem_of(s: Setting, seed: int, prior: bool = True) -> Problem:
    """The problem every searcher is given (see the module's docstring)."""
    table = s.table
    cells = list(table.cells.values())
    configs = [config_of(c) for c in cells]
    manifest = manifest_of(table.workload)
    log_offsets = offsets(cells)
    analytic = None
    if log_offsets is not None:
        lookup = dict(zip(configs, log_offsets))
        analytic = lambda cs: np.array([lookup[c] for c in cs])  # noqa: E731
    known = manifest is not None
    derived = tuple(k.name for k in manifest.knobs if k.derive is not None) if known else ()
    return Problem(
        configs,
        space_of(table),
        config_of(table.cells[table.baseline]),
        capacity_bytes=s.capacity,
        analytic_log_peak=analytic,
        patch_log_speed=patch_speeds(manifest) if known and prior else {},
        savers=savers(manifest) if known else MemorySavers(),
        noise_var_log=doctor_noise_var(table, seed),
        derived=derived,
    )


def manifest_of(workload: str):
    """A table's workload manifest, or None for a workload this checkout does not ship."""
    from infrarsi.workloads import find

    try:
        return find(workload)
    except Exception:  # a table of a workload this checkout does not ship
        return None


def make_searcher(name: str, problem: Problem, seed: int):
    """A registered searcher, or an InfraRSI ablation."""
    if name == "smac":
        from smac_peer import SMACSearcher  # a benchmark extra (scripts/setup.sh installs it)

        return SMACSearcher(problem, seed)
    if name in ABLATIONS:
        from infrarsi.run.infrarsi_searcher import InfraRSISearcher

        options = {k: v for k, v in ABLATIONS[name].items() if k != "prior"}
        return InfraRSISearcher(problem, seed, **options)
    return registry.make(name, problem, seed)


class Oracle:
    """Answers a replayed trial from the table (common random numbers per seed and visit)."""

    def __init__(self, s: Setting, seed: int):
        self.s, self.seed, self.visits = s, seed, {}

    def draw(self, config, stream: int = 0) -> int:
        """Which repeat of the cell this visit draws."""
        cell = self.s.by_config[config]
        key = (config, stream)
        visit = self.visits[key] = self.visits.get(key, 0) + 1
        rng = np.random.default_rng([self.seed, int(cell.cell[1:]), visit, stream])
        return int(rng.integers(len(cell.step_time_s)))

    def run(self, config, bound=None) -> Outcome:
        cell = self.s.by_config[config]
        if not cell.ok:
            return Outcome(
                status=next(x for x in cell.status if x != TrialStatus.OK), cost_s=cell.mean_cost_s
            )
        if cell.peak_bytes and cell.peak_bytes > self.s.capacity:
            return Outcome(
                "oom", cost_s=cell.mean_cost_s * self.s.oom_ratio, cap_bytes=self.s.capacity
            )
        r = self.draw(config)
        cost = cell.cost_s[min(r, len(cell.cost_s) - 1)]
        if bound is not None and cost > bound.after_s:
            return Outcome("slow", step_time_s=bound.censored_step_time_s, cost_s=bound.after_s)
        return Outcome(
            "ok",
            step_time_s=cell.step_time_s[r],
            peak_bytes=cell.peak_mem_bytes[min(r, len(cell.peak_mem_bytes) - 1)],
            cost_s=cost,
        )

    def remeasured_best(self, searcher) -> object | None:
        """The ``remeasure`` rule: of the searcher's top ``TOP_K``, the best mean of its
        measured times and ``REMEASURE`` new draws (a stream of their own)."""
        top = searcher.ranking(TOP_K)
        if not top:
            return None
        means = {}
        for config in top:
            cell = self.s.by_config[config]
            seen = [
                o.step_time_s
                for c, o in searcher.history
                if c == config and o.status == TrialStatus.OK
            ]
            more = [cell.step_time_s[self.draw(config, stream=1)] for _ in range(REMEASURE)]
            means[config] = statistics.fmean(math.log(t) for t in seen + more)
        return min(means, key=means.get)


def replay(name: str, s: Setting, seed: int, budget: int, problem: Problem | None = None) -> dict:
    """One searcher, one seed: after each trial, the regret of each rule's recommendation, the
    OOM trials and the wall cost so far, and how many trials ran as the searcher proposed.
    ``problem``: another problem than the one every searcher is given (a bank's advice added,
    ``transfer.py``)."""
    problem = problem or problem_of(s, seed, prior=ABLATIONS.get(name, {}).get("prior", True))
    searcher = make_searcher(name, problem, seed)
    oracle = Oracle(s, seed)
    trace = {"regret": [], "regret_own": [], "oom": [], "cost_s": [], "in_target": []}
    ooms, cost = 0, 0.0
    for _ in range(budget):
        config = searcher.ask()
        if config is None:
            break
        outcome = oracle.run(config, searcher.slow_bound())
        searcher.tell(config, outcome)
        ooms += outcome.status == TrialStatus.OOM
        cost += outcome.cost_s
        chosen = oracle.remeasured_best(searcher)
        trace["regret"].append(s.regret(chosen))
        trace["regret_own"].append(s.regret(searcher.recommend()))
        trace["in_target"].append(chosen in s.target)
        trace["oom"].append(ooms)
        trace["cost_s"].append(cost)
    for key in trace:  # a searcher that ran out of candidates keeps its last answer
        trace[key] += [trace[key][-1]] * (budget - len(trace[key])) if trace[key] else []
    trace["snapped"] = getattr(searcher, "snapped", 0)
    trace["exact"] = getattr(searcher, "exact", None)
    return trace
