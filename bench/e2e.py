"""End to end: ``optimize`` on each reference workload at the tables' ``bench`` scale, beside the
oracle — what the best configuration of the measured table achieves.

    .venv/bin/python bench/e2e.py                       # every workload, budget 40
    .venv/bin/python bench/e2e.py dense-1node --budget 40
    .venv/bin/python bench/e2e.py --quick               # dense-1node at tiny, budget 3

Writes ``bench/results/e2e.json``: per workload the verified speed-up with its interval, MFU
before and after, trials, OOM trials, total search cost, and the oracle. The oracle is the best
feasible cell of the committed table for this host's fingerprint (its mean step time over the
baseline cell's, at the same capacity); where no table of this host exists, the top 5 cells of
another host's table and the baseline are re-measured here, interleaved, and the best measured
ratio is the oracle. The instruction asks for throughput (steady step time: what the tables
measure) with a per-rank memory capacity at which about 30% of the table's cells run out of
memory, so the search meets real OOMs. Measure on a quiet machine (see bench/data/README.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import tables  # noqa: E402

from infrarsi.events import Event, StageStarted, TrialEnded  # noqa: E402
from infrarsi.host import fingerprint, machine_facts  # noqa: E402
from infrarsi.optimize import optimize  # noqa: E402
from infrarsi.options import Budget, OptimizeOptions, SearchOptions  # noqa: E402
from infrarsi.trial import prepare, run_trial  # noqa: E402
from infrarsi.workloads import find  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "e2e.json"
WORKLOADS = ["dense-1node", "dense-2node", "moe-1node", "moe-2node"]
MIB = 2**20


def table_for(workload: str, host: str) -> tuple[Path | None, bool]:
    """This host's table of the workload (True), another host's (False), or none."""
    mine = tables.DATA / f"{workload}-{host}.csv"
    if mine.exists():
        return mine, True
    others = sorted(tables.DATA.glob(f"{workload}-*.csv"))
    return (others[0], False) if others else (None, False)


def capacity_of(table: tables.Table) -> int:
    """A capacity where ~30% of the cells are OOM, never below what the baseline needs."""
    cap = table.capacity_for(0.3)
    base = table.cells[table.baseline].peak_bytes or 0
    return int(max(cap, 1.1 * base))


def oracle_from_table(table: tables.Table, capacity: int | None) -> dict:
    """The best feasible cell's mean step time over the baseline cell's."""
    base = table.cells[table.baseline].mean_step_time_s
    best = min(table.feasible(capacity), key=lambda c: c.mean_step_time_s)
    return {
        "source": f"table {table.name}",
        "speedup": base / best.mean_step_time_s,
        "cell": best.cell,
        "knobs": best.knobs,
        "patches": list(best.patches),
        "noise_cv": tables.noise_cv(table),
    }


def oracle_remeasured(workload: str, table: tables.Table, scale: str, rounds: int = 3) -> dict:
    """Top 5 cells of another host's table and the baseline, re-measured here interleaved."""
    manifest = find(workload)
    top = sorted(table.feasible(), key=lambda c: c.mean_step_time_s)[:5]
    specs = {"baseline": prepare(manifest, scale, {})}
    for cell in top:
        specs[cell.cell] = prepare(manifest, scale, _typed(manifest, cell.knobs), cell.patches)
    times: dict[str, list[float]] = {k: [] for k in specs}
    workdir = Path(".infrarsi") / "bench-e2e" / "oracle"
    for _ in range(rounds):
        for name, spec in specs.items():
            record = run_trial(dataclasses.replace(spec, evaluate=False), workdir)
            if record.status.is_ok():
                times[name].append(record.metrics.harness_step_time_s or record.metrics.step_time_s)
    base = statistics.median(times["baseline"])
    ratios = {k: base / statistics.median(v) for k, v in times.items() if v and k != "baseline"}
    best = max(ratios, key=ratios.get)
    cell = table.cells[best]
    return {
        "source": f"re-measured here: top 5 of {table.name}, {rounds} interleaved rounds",
        "speedup": ratios[best],
        "cell": best,
        "knobs": cell.knobs,
        "patches": list(cell.patches),
    }


def _typed(manifest, knobs: dict) -> dict:
    """Table knob values (strings) as the manifest's types; derived knobs left to derive."""
    out = {}
    for knob in manifest.knobs:
        if knob.name in knobs and knobs[knob.name] != "" and knob.derive is None:
            out[knob.name] = knob.coerce(knobs[knob.name])
    return out


def run_one(workload: str, scale: str, budget: int, top: int, out: Path, host: str) -> dict:
    """optimize on one workload, with its oracle."""
    path, mine = table_for(workload, host) if scale == "bench" else (None, False)
    table = tables.load(path) if path else None
    capacity = capacity_of(table) if table else None
    instruction = "maximise tokens per second; loss within 1%"
    if capacity:
        instruction += f"; memory under {capacity // MIB} MiB per rank"
    t0 = time.monotonic()
    options = OptimizeOptions(
        scale=scale,
        out_dir=out / workload,
        top_k=top,
        search=SearchOptions(budget=Budget(trials=budget)),
    )
    result = optimize(workload, instruction, options, on_event=_progress(workload))
    wall = time.monotonic() - t0
    summary = json.loads((Path(result.run_dir) / "apply.json").read_text())
    report = _report_summary(Path(result.run_dir))
    oracle = None
    if table is not None:
        oracle = (
            oracle_from_table(table, capacity // MIB * MIB)
            if mine
            else oracle_remeasured(workload, table, scale)
        )
    w = result.winner
    return {
        "instruction": instruction,
        "scale": scale,
        "budget": budget,
        "capacity_bytes": capacity,
        "promoted": result.promoted,
        "speedup": w.speedup if w else None,
        "ci_low": w.ci_low if w else None,
        "ci_high": w.ci_high if w else None,
        "winner": {"knobs": w.knobs, "patches": w.patches} if w else None,
        "decision": summary["decision"],
        "compared": summary["compared"],
        "mfu_before_pct": report["baseline"]["mfu_pct"],
        "mfu_after_pct": (report.get("winner") or {}).get("mfu_pct"),
        "trials": result.trials,
        "oom_trials": result.oom_trials,
        "search_cost_s": result.rounds[0].search_cost_s,
        "wall_s": wall,
        "oracle": oracle,
        "run_dir": result.run_dir,
    }


def _report_summary(run_dir: Path) -> dict:
    from infrarsi.report import gather

    return gather(run_dir).summary


def _progress(workload: str):
    t0 = time.monotonic()

    def emit(event: Event) -> None:
        if isinstance(event, StageStarted) and event.stage != "derive":
            print(f"[{time.monotonic() - t0:6.0f} s] {workload}: {event.stage}", flush=True)
        elif isinstance(event, TrialEnded) and event.stage == "run":
            time_s = event.ranked_time_per_step_s or 0
            print(f"    trial {event.seq}: {event.status} {time_s:.4f} s", flush=True)

    return emit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=None)
    parser.add_argument("--budget", type=int, default=40)
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--scale", default="bench")
    parser.add_argument("--quick", action="store_true", help="dense-1node at tiny, budget 3")
    parser.add_argument("--out", type=Path, default=Path(".infrarsi") / "bench-e2e")
    args = parser.parse_args()
    if args.quick:
        args.workloads, args.scale, args.budget, args.top = ["dense-1node"], "tiny", 3, 1
    host = fingerprint(machine_facts(os.cpu_count()))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results.setdefault("results", {})
    for workload in args.workloads or WORKLOADS:
        entry = run_one(workload, args.scale, args.budget, args.top, args.out / stamp, host)
        key = workload if args.scale == "bench" else f"{workload}@{args.scale}"
        results["results"][key] = {
            **entry,
            "fingerprint": host,
            "measured": time.strftime("%Y-%m-%d %H:%M"),
        }
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2))  # after each workload: nothing lost
        print(
            json.dumps(
                {
                    workload: {
                        k: entry[k]
                        for k in ("speedup", "ci_low", "ci_high", "trials", "oom_trials")
                    }
                }
            )
        )


if __name__ == "__main__":
    main()
