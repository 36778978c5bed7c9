"""Baseline and single-patch step time, throughput and peak memory of each reference workload.

    .venv/bin/python bench/workloads.py                       # cpu scale, 3 rounds, all workloads
    .venv/bin/python bench/workloads.py --scale tiny --repeats 2 --workloads dense-1node

Every candidate (the baseline, then the baseline plus one catalog patch) runs once per round;
rounds are interleaved and the order rotates each round, so slow phases of a shared machine hit
every candidate alike. Speed is reported as the ratio of the candidate's step time to the
baseline's *in the same round*: median and min-max over rounds. Writes
``bench/results/workloads.json`` (every trial's numbers, and the summary; a workload measured
again replaces its older entry) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from infrarsi.trial import prepare, run_trial
from infrarsi.units import format_bytes
from infrarsi.workloads import find, reference_names

RESULTS = Path(__file__).parent / "results" / "workloads.json"


def bench_workload(name: str, scale: str, repeats: int, workdir: Path) -> dict:
    """Interleaved rounds over baseline + each single patch; raw rows and per-candidate summary."""
    manifest = find(name)
    candidates = [""] + [p.id for p in manifest.patches]
    rows = []
    for round_index in range(repeats):
        shift = round_index % len(candidates)
        for candidate in candidates[shift:] + candidates[:shift]:
            patches = [candidate] if candidate else []
            record = run_trial(prepare(manifest, scale, {}, patches), workdir)
            rows.append(_row(round_index, candidate, record))
            print(
                f"  {name} round {round_index} {candidate or 'baseline'}: "
                f"{record.status.value} {rows[-1]['step_time_s']}",
                file=sys.stderr,
                flush=True,
            )
    return {
        "workload": name,
        "scale": scale,
        "repeats": repeats,
        "trials": rows,
        "summary": summarise(rows, candidates),
    }


def _row(round_index: int, candidate: str, record) -> dict:
    m = record.metrics
    return {
        "round": round_index,
        "candidate": candidate or "baseline",
        "status": record.status.value,
        "trial_id": record.trial_id,
        "step_time_s": m.step_time_s if m else None,
        "tokens_per_s": m.tokens_per_s if m else None,
        "peak_mem_bytes": m.peak_mem_bytes if m else None,
        "loss_last": m.loss[-1] if m else None,
        "error": record.error,
    }


def summarise(rows: list[dict], candidates: list[str]) -> list[dict]:
    """Per candidate: median step time, tokens/s, peak memory, and same-round ratios."""
    base = {r["round"]: r for r in rows if r["candidate"] == "baseline" and r["step_time_s"]}
    out = []
    for candidate in [c or "baseline" for c in candidates]:
        mine = [r for r in rows if r["candidate"] == candidate and r["step_time_s"]]
        ratios = [
            r["step_time_s"] / base[r["round"]]["step_time_s"] for r in mine if r["round"] in base
        ]
        out.append(
            {
                "candidate": candidate,
                "ok_trials": len(mine),
                "step_time_s_median": _median([r["step_time_s"] for r in mine]),
                "tokens_per_s_median": _median([r["tokens_per_s"] for r in mine]),
                "peak_mem_bytes_per_rank_max": [
                    max(col) for col in zip(*(r["peak_mem_bytes"] for r in mine))
                ],
                "step_time_ratio_median": _median(ratios),
                "step_time_ratio_min": min(ratios, default=None),
                "step_time_ratio_max": max(ratios, default=None),
            }
        )
    return out


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def print_table(result: dict) -> None:
    """One line per candidate."""
    print(f"\n{result['workload']} at scale {result['scale']} ({result['repeats']} rounds)")
    print(
        f"{'candidate':24} {'step_time_s':>11} {'tokens_per_s':>12} {'ratio (min-max)':>22} "
        f"peak_mem per rank"
    )
    for s in result["summary"]:
        if s["step_time_s_median"] is None:
            print(f"{s['candidate']:24} failed")
            continue
        ratio = (
            f"{s['step_time_ratio_median']:.3f} ({s['step_time_ratio_min']:.3f}-"
            f"{s['step_time_ratio_max']:.3f})"
        )
        peaks = ", ".join(format_bytes(b) for b in s["peak_mem_bytes_per_rank_max"])
        print(
            f"{s['candidate']:24} {s['step_time_s_median']:11.4f} "
            f"{s['tokens_per_s_median']:12,.0f} {ratio:>22} {peaks}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workloads", nargs="*", default=reference_names())
    parser.add_argument("--workdir", type=Path, default=Path(".infrarsi/bench"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    started = time.time()
    for name in args.workloads:
        result = bench_workload(name, args.scale, args.repeats, args.workdir)
        print_table(result)
        save(args.out, result)
    print(f"\nwrote {args.out} in {time.time() - started:.0f} s")


def save(path: Path, result: dict) -> None:
    """Add one workload's result to the file, replacing an older one of the same workload/scale."""
    old = json.loads(path.read_text())["results"] if path.exists() else []
    keep = [r for r in old if (r["workload"], r["scale"]) != (result["workload"], result["scale"])]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"results": keep + [result]}, indent=2))


if __name__ == "__main__":
    main()
