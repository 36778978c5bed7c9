"""Does the experience bank make a search on another host start smarter? Replays on real tables
of one workload measured on two hardware configurations.

    .venv/bin/python bench/transfer.py                        # every pair in bench/data
    .venv/bin/python bench/transfer.py --pair A.csv B.csv     # one pair, both directions
    .venv/bin/python bench/transfer.py --seeds 30 --out bench/results/transfer.json

For a direction source -> target, the bank holds the source table's outcomes as experiences
(every grid row: its speed-up over the source's baseline mean, its peak over the baseline's, an
OOM censored) under the source host's hardware signature (``bench/data/hardware-<fp>.json``,
what the Doctor's probe measured there) and the workload's signature. InfraRSI is replayed on
the target table (``replay.py``: its capacity, oracle, target set and regret) three ways:

- **cold**: an empty bank (what every searcher is given, nothing more);
- **warm**: the bank's advice (``infrarsi.bank.transfer.advise``) — seeds and the time and
  memory priors, weighted by the similarity of the source host to the target's, each source
  config read on the target host as ``optimize`` reads it (``bank.translate``: the rank count
  scaled with the cores); a seed's measured peak ratio meets the target baseline's peak as the
  Doctor measures it there (the largest of the baseline cell's peaks);
- **harmful**: a bank as similar as the source but disagreeing with the target as much as it
  can: the source's outcomes with every log speed-up negated (what was fastest there is told
  as slowest), so the search's negative-transfer guard is what stands between it and a worse
  search than cold.

Per direction, over seeds: trials to reach the target set (median) and the simple regret at 5,
10 and 20 trials (median), each way; the seeds the warm bank gave; and the verdict of the two
checks (``verdict``: warm fewer than cold, or a tie at the floor where cold's first trial after
the baseline already reaches the target; harmful within 10% of cold). The searcher's
constants and the bank's (``transfer.py``'s ``RIDGE``, ``SEEDS``, ...) are frozen in the code;
no table here chose them.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

import tables  # noqa: E402
from models import config_of  # noqa: E402
from replay import (  # noqa: E402
    OOM_FRACTION,
    manifest_of,
    probe_of,
    problem_of,
    replay,
    setting_of,
)

from infrarsi.bank.signatures import (  # noqa: E402
    hardware_signature,
    low_precision_reader,
    similarity,
    workload_signature,
)
from infrarsi.bank.transfer import advise  # noqa: E402
from infrarsi.bank.translate import translator  # noqa: E402
from infrarsi.identity import config_key  # noqa: E402
from infrarsi.records.trial import TrialStatus  # noqa: E402
from infrarsi.run.problem_build import bank_gains, bank_peaks, bank_time_prior  # noqa: E402
from infrarsi.store.bank import Experience  # noqa: E402

DATA = Path(__file__).parent / "data"
RESULTS = Path(__file__).parent / "results" / "transfer.json"
CHECKPOINTS = (5, 10, 20)
BUDGET = 20
WAYS = ("warm", "cold", "harmful")
SCALE = "bench"  # the scale every table is measured at (make_table.py)


def hardware_of(table: tables.Table) -> dict:
    """The hardware signature of a table's host (``bench/data/hardware-<fp>.json``: the
    Doctor's probe there), or the fingerprint alone; every node of the workload ran on that
    host (``make_table.py`` runs its trials locally)."""
    probe = probe_of(table)
    if not probe:
        return {"fingerprint": table.fingerprint}
    manifest = manifest_of(table.workload)
    nodes = manifest.launch.nodes if manifest is not None else None
    return hardware_signature(probe, nodes=nodes, nodes_per_host=nodes)


def workload_of(table: tables.Table) -> dict:
    """The workload signature of a table (its manifest at the table's scale; its name alone
    for a workload this checkout does not ship)."""
    manifest = manifest_of(table.workload)
    if manifest is None:
        return {"name": table.workload}
    base = config_of(table.cells[table.baseline]).knob_dict
    return workload_signature(manifest, SCALE, base)


def experiences_of(
    table: tables.Table, hardware: dict, workload: dict, negate: bool = False
) -> list[Experience]:
    """A table's grid rows as bank experiences (``negate``: every log speed-up turned round)."""
    base = table.cells[table.baseline]
    base_time, base_peak = base.mean_step_time_s, doctor_peak(table)
    out = []
    for cell in table.cells.values():
        config = config_of(cell)
        rows = [
            (
                "ok",
                t,
                cell.peak_mem_bytes[min(j, len(cell.peak_mem_bytes) - 1)]
                if cell.peak_mem_bytes
                else None,
            )
            for j, t in enumerate(cell.step_time_s)
        ]
        rows += [(status, None, None) for status in cell.status if status != TrialStatus.OK]
        for i, (status, step, peak) in enumerate(rows):
            speedup = base_time / step if step else None
            if speedup and negate:
                speedup = 1 / speedup
            out.append(
                Experience(
                    key=f"{table.name}/{cell.cell}/{i}",
                    created_unix_s=0.0,
                    run_id=table.name,
                    contract_hash="",
                    stage="run",
                    workload=table.workload,
                    scale=SCALE,
                    hardware_fp=table.fingerprint,
                    hardware_json=hardware,
                    workload_fp="",
                    workload_json=workload,
                    knobs_json=config.knob_dict,
                    patches_json=[{"id": p, "sha256": None} for p in sorted(config.patches)],
                    status=status,
                    speedup=speedup,
                    censored=status == TrialStatus.OOM,
                    peak_mem_bytes=peak,
                    baseline_peak_mem_bytes=base_peak,
                )
            )
    return out


def translator_of(table: tables.Table, hardware: dict):
    """How the bank reads an experience's knobs on the target host (``optimize``'s rule: the
    rank count scaled with the cores); None for a workload this checkout does not ship."""
    manifest = manifest_of(table.workload)
    return None if manifest is None else translator(manifest, SCALE, hardware)


def warm_problem(
    s,
    seed: int,
    bank: list[Experience],
    hardware: dict,
    workload: dict,
    translate=None,
    low_precision=None,
):
    """The problem every searcher is given, plus the bank's seeds (with their measured peak
    ratios and the target baseline's peak, as the Doctor measures it before a run) and time
    prior."""
    problem = problem_of(s, seed)
    advice = advise(
        bank,
        hardware,
        workload,
        bank_url="replay",
        baseline=problem.baseline.knob_dict,
        translate=translate,
        low_precision=low_precision,
    )
    by_key = {config_key(c.knob_dict, c.patches): c for c in problem.candidates}
    chosen = {}  # the target's config of each seed it has, the first seed where two are one
    for x in advice.seeds:
        config = by_key.get(config_key(x.knobs, x.patches))
        if config is not None:
            chosen.setdefault(config, x)
    seeds = list(chosen)
    problem = dataclasses.replace(
        problem,
        seeds=seeds,
        bank_seeds=seeds,
        bank_gain=bank_gains(chosen),
        bank_peak=bank_peaks(chosen),
        baseline_peak_bytes=doctor_peak(s.table),
        bank_log_speed=bank_time_prior(advice, problem.baseline),
    )
    return problem, advice


def first_in_target(trace: dict, budget: int) -> int | None:
    """The trial after which the recommendation first entered the target set (None:
    never)."""
    return next((i + 1 for i, hit in enumerate(trace["in_target"][:budget]) if hit), None)


def doctor_peak(table: tables.Table) -> float | None:
    """The baseline's per-rank peak the Doctor would measure on the target host (a run's
    largest; peaks repeat to within bytes between runs of one config)."""
    return float(max(table.cells[table.baseline].peak_mem_bytes or [0])) or None


def direction(source: tables.Table, target: tables.Table, seeds: int) -> dict:
    """Warm, cold and harmful replays of InfraRSI on ``target`` with a bank from ``source``."""
    s = setting_of(target, OOM_FRACTION)
    hw_s, hw_t = hardware_of(source), hardware_of(target)
    wl_s, wl_t = workload_of(source), workload_of(target)
    banks = {
        "warm": experiences_of(source, hw_s, wl_s),
        "harmful": experiences_of(source, hw_s, wl_s, negate=True),
    }
    translate = translator_of(target, hw_t)
    low = low_precision_reader(manifest_of(target.workload))  # read once per direction
    traces, advice_seen = defaultdict(list), {}
    for seed in range(seeds):
        for way in WAYS:
            problem = None
            if way in banks:
                problem, advice = warm_problem(s, seed, banks[way], hw_t, wl_t, translate, low)
                advice_seen[way] = advice
            traces[way].append(replay("infrarsi", s, seed, BUDGET, problem))
    out = {
        "similarity": similarity(hw_s, wl_s, hw_t, wl_t),
        "similarity_without_low_precision": similarity(hw_s, wl_s, hw_t, wl_t, False),
        "target_cells": len(s.target),
        "cells": len(target.cells),
    }
    for way in WAYS:
        hits = [first_in_target(t, BUDGET) for t in traces[way]]
        out[f"{way}_trials_to_target_median"] = _median(
            [math.inf if h is None else h for h in hits]
        )
        out[f"{way}_share_reaching_target"] = sum(h is not None for h in hits) / len(hits)
        out[f"{way}_regret"] = {
            str(b): _median([t["regret"][b - 1] for t in traces[way]]) for b in CHECKPOINTS
        }
        out[f"{way}_cost_to_target_s_median"] = _median(
            [t["cost_s"][h - 1] if h else math.inf for t, h in zip(traces[way], hits)]
        )
        out[f"{way}_per_seed_trials_to_target"] = [h for h in hits]
    out["floor_trials"] = 1 if config_of(target.cells[target.baseline]) in s.target else 2
    out.update(verdict(out))
    out["warm_seeds"] = [
        {
            "knobs": x.knobs,
            "patches": x.patches,
            "as_measured": x.as_measured,
            "expected_speedup": x.expected_speedup,
            "true_speedup_here": _true_speedup(s, x),
        }
        for x in advice_seen["warm"].seeds
    ]
    return out


def verdict(r: dict) -> dict:
    """The issue's two checks on one direction: warm needs fewer trials than cold (``tie at
    the floor`` where cold already reaches the target on the first trial after the baseline,
    which no bank can beat), and harmful needs at most 10% more than cold (never reaching it
    counts as more than the budget)."""

    def trials(way):
        value = r[f"{way}_trials_to_target_median"]
        return math.inf if value is None else value

    warm, cold, harmful = trials("warm"), trials("cold"), trials("harmful")
    if warm < cold:
        fewer = "warm fewer"
    elif warm == cold == r["floor_trials"]:
        fewer = "tie at the floor"
    else:
        fewer = "warm not fewer"
    return {"warm_vs_cold": fewer, "harmful_within_10pct_of_cold": bool(harmful <= 1.1 * cold)}


def _true_speedup(s, seed) -> float | None:
    key = config_key(seed.knobs, seed.patches)
    for config, log_t in s.true_log.items():
        if config_key(config.knob_dict, config.patches) == key:
            base = s.true_log[config_of(s.table.cells[s.table.baseline])]
            return math.exp(base - log_t) if math.isfinite(log_t) else None
    return None


def _median(values: list[float]) -> float | None:
    value = statistics.median(values) if values else None
    return None if value is None or not math.isfinite(value) else value


def pairs(given: list[list[str]] | None) -> list[tuple[Path, Path]]:
    """The given pairs, else every two full-factorial tables of one workload on two hosts."""
    if given:
        return [(Path(a), Path(b)) for a, b in given]
    by_workload = defaultdict(list)
    for path in sorted(DATA.glob("*-full-*.csv")):
        by_workload[path.name.rsplit("-", 1)[0]].append(path)
    return [
        (a, b)
        for paths in by_workload.values()
        for i, a in enumerate(paths)
        for b in paths[i + 1 :]
    ]


def _one(job: tuple[Path, Path, int]) -> tuple[str, dict]:
    """One direction (source table path, target table path, seeds), timed and printed."""
    source, target, seeds = tables.load(job[0]), tables.load(job[1]), job[2]
    t0 = time.perf_counter()
    name = f"{source.name} -> {target.name}"
    r = direction(source, target, seeds)
    print(
        f"{name}: to target warm/cold/harmful "
        f"{r['warm_trials_to_target_median']}/{r['cold_trials_to_target_median']}/"
        f"{r['harmful_trials_to_target_median']}; regret@10 "
        f"{r['warm_regret']['10']}/{r['cold_regret']['10']}/"
        f"{r['harmful_regret']['10']}; {r['warm_vs_cold']}, harmful within 10% "
        f"of cold: {r['harmful_within_10pct_of_cold']} "
        f"({time.perf_counter() - t0:.0f} s)",
        file=sys.stderr,
        flush=True,
    )
    return name, r


def _run_all(jobs: list, workers: int) -> list[tuple[str, dict]]:
    """Every direction, ``workers`` at a time, in the order given."""
    if workers <= 1:
        return [_one(job) for job in jobs]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(_one, jobs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--pair",
        nargs=2,
        action="append",
        metavar=("A", "B"),
        help="two tables of one workload on two hosts (both directions)",
    )
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--jobs", type=int, default=1, help="directions replayed at once (the replays are untimed)"
    )
    args = parser.parse_args(argv)
    found = pairs(args.pair)
    if not found:
        print(
            "no pair of tables of one workload on two hosts in bench/data: measure one "
            "with bench/make_table.py on another host (or confined: taskset -c 0)",
            file=sys.stderr,
        )
        return 2
    jobs = []
    for a, b in found:
        ta, tb = tables.load(a), tables.load(b)
        if ta.workload != tb.workload or ta.fingerprint == tb.fingerprint:
            print(f"skipping {a.name} / {b.name}: not one workload on two hosts", file=sys.stderr)
            continue
        jobs += [(a, b, args.seeds), (b, a, args.seeds)]
    results = dict(_run_all(jobs, args.jobs))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "results": results,
                "settings": {
                    "seeds": args.seeds,
                    "budget": BUDGET,
                    "checkpoints": list(CHECKPOINTS),
                    "oom_fraction": OOM_FRACTION,
                },
            },
            indent=1,
        )
    )
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
