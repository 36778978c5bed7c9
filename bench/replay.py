"""One searcher replayed on one measured table: the problem every searcher is given, the oracle
that answers its trials, the target set and the regret of what it would recommend.

**What every searcher is given** — what a user of that tool could give it, and nothing from the
table it is scored on: the candidates (the table's cells), the analytic memory estimate (a
prefilter for any searcher; a prior for InfraRSI's memory model), the start points (the
baseline, and the catalog's pick among the cells the estimate says fit), the knobs that are
derived, whether the candidates are the whole space (a full-factorial table) or a sample of it,
and what the Doctor measured before the search: ``DOCTOR_RUNS`` runs of the baseline (draws of
the baseline cell's replay repeats), told to every searcher as measurements of the baseline
before its first trial (as a run tells its searcher), and their spread as the between-run noise
(never the table's spread over all cells).

**Two pools of repeats.** Where every ok cell has at least ``TRUTH_SPLIT_MIN`` repeats, each
cell's repeats are split (seeded by the cell) into a *replay* pool, which answers trials, and a
*truth* pool, whose mean is the cell's true step time; a searcher that re-measures a cell often
then converges on an estimate, not on the score. A table with fewer repeats uses all of them for
both, and its results say so (``truth_split``).

**The oracle** answers a trial of a cell at the capacity by the replay rule (see
``bench/data/README.md``): ``oom`` (costing the cell's cost times the measured OOM/ok ratio)
when the cell's peak is above the capacity, else one of its replay repeats drawn at random
(common random numbers: a seed draws the same repeat for the same visit of a cell, whatever the
searcher). A searcher that sets a slow bound (``Searcher.slow_bound``) has a trial whose cost
passes it cut there: told ``slow`` at the bound's censored time, charged the bound. A trial's
cost also charges the searcher's own compute for that trial (its ``ask`` and ``tell``, CPU
seconds of this process, so another job on the machine does not inflate it).

**Scoring** (``scoring.py``): the target set, the normalised regret of a recommendation, trials
to target. Two recommendation rules: ``own`` (the searcher's incumbent, as its authors define
it) and ``remeasure`` — one rule for all, the primary: the searcher's top ``TOP_K`` configs and
the baseline, each measured ``REMEASURE`` more times, the best mean wins (Apply's rule, without
its checks: a candidate no faster than the baseline leaves the baseline in place); the
re-measures of trial *i* are drawn by (seed, cell, *i*), the same for every searcher.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scoring
import tables
from models import config_of, inferred_derived, offsets, space_of
from peers import ABLATIONS, MODEL_PEERS, make_searcher

from infrarsi.records.trial import TrialStatus
from infrarsi.run.problem import UNSTEADY_CV, MemorySavers, Outcome, Parallelism, Problem
from infrarsi.run.problem_build import (
    parallelism,
    patch_speeds,
    precision_prior,
    run_to_run_var,
    savers,
)

OOM_FRACTION = 0.3
DOCTOR_RUNS = 3
TOP_K = 3
REMEASURE = 2
TRUTH_SPLIT_MIN = 6


@dataclass
class Pool:
    """One cell's repeats as the replay sees them: those that answer trials and those whose
    mean is the truth (the same list where the table is not split)."""

    step_time_s: list[float]
    cost_s: list[float]
    peak_bytes: list[float]
    truth_s: list[float]
    per_step_s: list[list[float]] = field(default_factory=list)  # each replay repeat's steps


@dataclass
class Setting:
    """A table at a capacity, with its truth: per config the true mean log step time (of its
    truth pool), the target set, the best and the baseline."""

    table: tables.Table
    capacity: float
    by_config: dict
    oom_ratio: float
    true_log: dict
    target: set
    best_log: float
    baseline_regret: float
    pools: dict
    truth_split: bool
    norm_log: float  # log of the normaliser: the baseline's true time, or the slowest feasible
    something_to_find: bool  # the baseline is not within the target width of the best

    def regret(self, config) -> float:
        """Simple regret of recommending ``config``: log(true time / best) (None: nothing
        found yet — the baseline's, infinite where it does not fit)."""
        return self.baseline_regret if config is None else self.true_log[config] - self.best_log

    def regret_norm(self, config) -> float:
        """Normalised regret (``scoring.normalised_regret``) of recommending ``config``."""
        t_rec = None if config is None else math.exp(self.true_log[config])
        return scoring.normalised_regret(t_rec, math.exp(self.best_log), math.exp(self.norm_log))


def pools_of(table: tables.Table) -> tuple[dict, bool]:
    """Each cell's replay and truth pools, and whether the table is split (see the module's
    docstring)."""
    ok = [c for c in table.cells.values() if c.ok]
    split = bool(ok) and all(len(c.step_time_s) >= TRUTH_SPLIT_MIN for c in ok)
    pools = {}
    for cell in table.cells.values():
        n = len(cell.step_time_s)
        idx = list(range(n))
        if split and cell.ok:
            order = np.random.default_rng([int(cell.cell[1:]), 11]).permutation(n)
            replay_idx, truth_idx = sorted(order[: (n + 1) // 2]), sorted(order[(n + 1) // 2 :])
        else:
            replay_idx = truth_idx = idx
        pools[config_of(cell)] = Pool(
            [cell.step_time_s[i] for i in replay_idx],
            [cell.cost_s[min(i, len(cell.cost_s) - 1)] for i in replay_idx] if cell.cost_s else [],
            [cell.peak_mem_bytes[min(i, len(cell.peak_mem_bytes) - 1)] for i in replay_idx]
            if cell.peak_mem_bytes
            else [],
            [cell.step_time_s[i] for i in truth_idx],
            [cell.per_step_s[i] for i in replay_idx] if cell.per_step_s else [],
        )
    return pools, split


def setting_of(
    table: tables.Table, oom_fraction: float = OOM_FRACTION, capacity: float | None = None
) -> Setting:
    """The table at a capacity where ``oom_fraction`` of the ok cells do not fit — raised to
    the baseline's peak where that would leave the baseline out: a user's job runs at its
    capacity, so the baseline fits (fewer cells then fail; ``oom_share`` says how many).
    ``capacity``: this one instead (a test of a baseline that does not fit)."""
    if capacity is None:
        capacity = table.replay_capacity(oom_fraction)
        base_cell = table.cells[table.baseline]
        if base_cell.ok and base_cell.peak_bytes:
            capacity = max(capacity, base_cell.peak_bytes)
    cells = list(table.cells.values())
    by_config = {config_of(c): c for c in cells}
    pools, split = pools_of(table)
    feasible = {config_of(c) for c in table.feasible(capacity)}
    true_log = {
        cfg: math.log(statistics.fmean(pools[cfg].truth_s)) if pools[cfg].truth_s else math.inf
        for cfg in by_config
    }
    se = {cfg: _se_log(pools[cfg].truth_s) for cfg in feasible}
    base = config_of(table.cells[table.baseline])
    target, best = scoring.target_set(true_log, se, feasible, base if base in feasible else None)
    base_regret = true_log[base] - true_log[best] if base in feasible else math.inf
    norm_log = true_log[base] if base in feasible else max(true_log[c] for c in feasible)
    width = scoring.target_width(se.get(best, 0.0))
    return Setting(
        table,
        capacity,
        by_config,
        oom_cost_ratio(table),
        true_log,
        target,
        true_log[best],
        base_regret,
        pools,
        split,
        norm_log,
        norm_log - true_log[best] > width,
    )


def _se_log(times: list[float]) -> float:
    """Standard error of a mean log step time (0 with one repeat)."""
    logs = [math.log(t) for t in times]
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


def doctor_runs(s: Setting, seed: int) -> list[Outcome]:
    """The Doctor's ``DOCTOR_RUNS`` runs of the baseline: draws of the baseline cell's replay
    repeats (ok, at the capacity the baseline fits; none where it does not)."""
    base = config_of(s.table.cells[s.table.baseline])
    pool, cell = s.pools[base], s.table.cells[s.table.baseline]
    if not cell.ok or (cell.peak_bytes and cell.peak_bytes > s.capacity) or not pool.step_time_s:
        return []
    rng = np.random.default_rng([seed, 7])
    picks = [int(i) for i in rng.integers(len(pool.step_time_s), size=DOCTOR_RUNS)]
    return [
        Outcome(
            "ok",
            ranked_time_per_step_s=pool.step_time_s[i],
            peak_bytes=pool.peak_bytes[i] if pool.peak_bytes else None,
            cost_s=pool.cost_s[i] if pool.cost_s else 0.0,
        )
        for i in picks
    ]


def doctor_noise_var(s: Setting, seed: int) -> float:
    """The between-run variance of log time the Doctor would report from its runs."""
    times = [o.time_s for o in doctor_runs(s, seed)]
    if len(times) < 2:
        return run_to_run_var(None)
    return run_to_run_var(statistics.stdev(times) / statistics.fmean(times))


def probe_of(table: tables.Table) -> dict:
    """What the Doctor's probe measured on the table's host (``data/hardware-<fingerprint>.json``),
    empty where this checkout has no probe of it; read once per host."""
    return _probe(table.fingerprint)


@functools.cache
def _probe(fingerprint: str) -> dict:
    path = Path(__file__).parent / "data" / f"hardware-{fingerprint}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def parallelism_of(table: tables.Table, manifest) -> Parallelism:
    """The ranks and threads knobs of a table's workload, its nodes (all on the table's host:
    ``make_table.py`` runs them locally) and that host's cores (its hardware probe, where the
    table's fingerprint has one; unknown otherwise)."""
    if manifest is None:
        return Parallelism()
    cores = probe_of(table).get("facts", {}).get("cores")
    return dataclasses.replace(parallelism(manifest, None), cores=cores)


def doctor_unsteady(s: Setting, seed: int) -> bool:
    """Whether the Doctor's runs of the baseline would judge the host unsteady (their
    between-run cv past ``UNSTEADY_CV``, or fewer than two runs), as a live run judges it."""
    times = [o.time_s for o in doctor_runs(s, seed)]
    if len(times) < 2:
        return True
    return statistics.stdev(times) / statistics.fmean(times) > UNSTEADY_CV


def doctor_peak_bytes(s: Setting, seed: int) -> float | None:
    """The baseline's per-rank peak the Doctor's runs measured (their largest), None where
    they measured none: what scales the analytic memory formula before the first trial."""
    peaks = [o.peak_bytes for o in doctor_runs(s, seed) if o.peak_bytes]
    return float(max(peaks)) if peaks else None


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
    derived = (
        tuple(k.name for k in manifest.knobs if k.derive is not None)
        if known
        else inferred_derived(table)
    )
    return Problem(
        configs,
        space_of(table),
        config_of(table.cells[table.baseline]),
        capacity_bytes=s.capacity,
        analytic_log_peak=analytic,
        patch_log_speed=patch_speeds(manifest) if known and prior else {},
        savers=savers(manifest) if known else MemorySavers(),
        parallelism=parallelism_of(table, manifest),
        noise_var_log=doctor_noise_var(s, seed),
        baseline_peak_bytes=doctor_peak_bytes(s, seed),
        unsteady=doctor_unsteady(s, seed),
        precision_log_speed=precision_prior(
            manifest, config_of(table.cells[table.baseline]), probe_of(table).get("peak_flops")
        )
        if known
        else None,
        derived=derived,
        complete=table.design == "full_factorial",
    )


def manifest_of(workload: str):
    """A table's workload manifest (``tables.manifest_of``), None for one not kept here."""
    return tables.manifest_of(workload)


class Oracle:
    """Answers a replayed trial from the table's replay pools (common random numbers per seed
    and visit)."""

    def __init__(self, s: Setting, seed: int):
        self.s, self.seed, self.visits = s, seed, {}

    def draw(self, config) -> int:
        """Which replay repeat of the cell this visit draws."""
        cell = self.s.by_config[config]
        visit = self.visits[config] = self.visits.get(config, 0) + 1
        rng = np.random.default_rng([self.seed, int(cell.cell[1:]), visit, 0])
        return int(rng.integers(len(self.s.pools[config].step_time_s)))

    def run(self, config, bound=None, stop_after=lambda config, steps: None) -> Outcome:
        """A trial of ``config``: ``bound`` cuts it at a wall cost (``Searcher.slow_bound``),
        ``stop_after(config, step_times)`` after the number of steps it returns (a
        multi-fidelity searcher's pruner; None runs every step): told ``slow`` with the median
        of the steps it ran (the first, a warm-up, left out), charged what it ran."""
        cell, pool = self.s.by_config[config], self.s.pools[config]
        if not cell.ok:
            return Outcome(
                status=next(x for x in cell.status if x != TrialStatus.OK), cost_s=cell.mean_cost_s
            )
        if cell.peak_bytes and cell.peak_bytes > self.s.capacity:
            return Outcome(
                "oom", cost_s=cell.mean_cost_s * self.s.oom_ratio, cap_bytes=self.s.capacity
            )
        r = self.draw(config)
        cost = pool.cost_s[r] if pool.cost_s else 0.0
        if bound is not None and cost > bound.after_s:
            return Outcome(
                "slow", ranked_time_per_step_s=bound.censored_step_time_s, cost_s=bound.after_s
            )
        steps = pool.per_step_s[r] if pool.per_step_s else []
        cut = stop_after(config, steps)
        if cut is not None and steps and 0 < cut < len(steps):  # a fidelity: fewer steps
            return Outcome(
                "slow",
                ranked_time_per_step_s=statistics.median(steps[1:cut] or steps[:cut]),
                cost_s=cost - sum(steps[cut:]),
            )
        return Outcome(
            "ok",
            ranked_time_per_step_s=pool.step_time_s[r],
            peak_bytes=pool.peak_bytes[r] if pool.peak_bytes else None,
            cost_s=cost,
        )

    def remeasured_best(self, searcher, trial: int) -> object | None:
        """The ``remeasure`` rule after trial ``trial``: of the searcher's top ``TOP_K`` and
        the baseline (as Apply keeps the baseline unless a candidate beats it), the best mean
        of its measured times and ``REMEASURE`` new draws, keyed by (seed, cell, trial) — the
        same draws for every searcher that ranks that cell there. None before anything ran
        ok."""
        top = searcher.ranking(TOP_K)
        if not top:
            return None
        base = config_of(self.s.table.cells[self.s.table.baseline])
        if base not in top and any(
            c == base and o.status == TrialStatus.OK for c, o in searcher.history
        ):
            top = [*top, base]
        means = {}
        for config in top:
            cell, pool = self.s.by_config[config], self.s.pools[config]
            seen = [
                o.ranked_time_per_step_s
                for c, o in searcher.history
                if c == config and o.status == TrialStatus.OK
            ]
            rng = np.random.default_rng([self.seed, int(cell.cell[1:]), trial, 1])
            more = [
                pool.step_time_s[int(i)]
                for i in rng.integers(len(pool.step_time_s), size=REMEASURE)
            ]
            means[config] = statistics.fmean(math.log(t) for t in seen + more)
        return min(means, key=means.get)


TRACE_KEYS = (
    "regret",
    "regret_own",
    "regret_norm",
    "regret_norm_own",
    "in_target",
    "in_target_own",
    "oom",
    "cost_s",
    "searcher_cpu_s",
)


def replay(name: str, s: Setting, seed: int, budget: int, problem: Problem | None = None) -> dict:
    """One searcher, one seed: after each trial, each rule's recommendation's regret (log and
    normalised) and whether it is in the target set, the OOM trials, the wall cost so far
    (trials and the searcher's own compute) and that compute alone. On a full-factorial table
    a peer whose sampler proposes must run exactly what it proposed, trial by trial
    (AssertionError otherwise). ``problem``: another problem than the one every searcher is
    given (a bank's advice added, ``transfer.py``)."""
    problem = problem or problem_of(s, seed, prior=ABLATIONS.get(name, {}).get("prior", True))
    cpu0 = time.process_time()
    searcher = make_searcher(name, problem, seed)
    for outcome in doctor_runs(s, seed):  # measured before the search, as in a run
        searcher.tell(problem.baseline, outcome)
    setup_cpu = time.process_time() - cpu0
    oracle = Oracle(s, seed)
    exact_required = s.table.design == "full_factorial" and name in MODEL_PEERS
    trace: dict = {k: [] for k in TRACE_KEYS}
    ooms, cost, cpu = 0, 0.0, setup_cpu
    for trial in range(1, budget + 1):
        t0 = time.process_time()
        config = searcher.ask()
        if config is None:
            break
        if exact_required and config != getattr(searcher, "proposed", None):
            raise AssertionError(
                f"{name} seed {seed} trial {trial} on {s.table.name}: ran {config.describe()}, "
                f"its sampler proposed {getattr(searcher, 'proposed', None)}"
            )
        outcome = oracle.run(
            config, searcher.slow_bound(), getattr(searcher, "stop_after", lambda c, s: None)
        )
        searcher.tell(config, outcome)
        step_cpu = time.process_time() - t0
        ooms += outcome.status == TrialStatus.OOM
        cpu += step_cpu
        cost += outcome.cost_s + step_cpu + (setup_cpu if trial == 1 else 0.0)
        chosen, own = oracle.remeasured_best(searcher, trial), searcher.recommend()
        trace["regret"].append(s.regret(chosen))
        trace["regret_own"].append(s.regret(own))
        trace["regret_norm"].append(s.regret_norm(chosen))
        trace["regret_norm_own"].append(s.regret_norm(own))
        trace["in_target"].append(chosen in s.target)
        trace["in_target_own"].append(own in s.target)
        trace["oom"].append(ooms)
        trace["cost_s"].append(cost)
        trace["searcher_cpu_s"].append(cpu)
    for key in trace:  # a searcher that ran out of candidates keeps its last answer
        trace[key] += [trace[key][-1]] * (budget - len(trace[key])) if trace[key] else []
    trace["snapped"] = getattr(searcher, "snapped", 0)
    trace["exact"] = getattr(searcher, "exact", None)
    return trace
