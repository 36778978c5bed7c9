"""``infrarsi demo``: the bundled workload's baseline against each catalog patch, interleaved.

Until the search stages exist, the demo shows the ground floor end to end on one machine,
offline: real isolated trials, their loss checked against the baseline's, and the fastest
patch that keeps the loss within the workload's tolerance, with the spread of the repeats.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from infrarsi import units
from infrarsi.trial import TrialRecord, TrialStatus, prepare, run_trial
from infrarsi.workloads import find

DEMO_WORKLOAD = "dense-1node"


def max_rel_drift(loss: list[float], reference: list[float]) -> float:
    """Largest point-wise relative difference between two loss trajectories."""
    return max(abs(a - b) / abs(b) for a, b in zip(loss, reference))


def run_demo(scale: str, repeats: int, workdir: Path, out: Console, err: Console) -> None:
    """Run the rounds, then print the comparison table and the winner."""
    manifest = find(DEMO_WORKLOAD)
    candidates = [()] + [(p.id,) for p in manifest.patches]
    records: dict[tuple, list[TrialRecord]] = {c: [] for c in candidates}
    with Progress(console=err, transient=True) as progress:
        task = progress.add_task("trials", total=repeats * len(candidates))
        for _ in range(repeats):
            for patches in candidates:
                name = "+".join(patches) or "baseline"
                progress.update(task, description=f"{name}")
                records[patches].append(run_trial(prepare(manifest, scale, {}, patches), workdir))
                progress.advance(task)
    _print(manifest, records, out, repeats)


def _summary(runs: list[TrialRecord]) -> dict | None:
    ok = [r for r in runs if r.status is TrialStatus.OK]
    if len(ok) != len(runs):
        return None
    times = [r.metrics.step_time_s for r in ok]
    return {"median": statistics.median(times), "min": min(times), "max": max(times),
            "tokens_per_s": statistics.median(r.metrics.tokens_per_s for r in ok),
            "peak": max((r.metrics.max_peak_mem_bytes or 0) for r in ok), "loss": ok[0].metrics.loss}


def _print(manifest, records: dict, out: Console, repeats: int) -> None:
    base = _summary(records[()])
    if base is None:
        out.print(f"[red]the baseline did not run:[/] {records[()][-1].error}")
        return
    table = Table(title=f"{manifest.name}: baseline vs each catalog patch "
                        f"({repeats} interleaved round(s), median step time)")
    for col in ("candidate", "step_time_s", "spread (min-max)", "speed-up x", "tokens_per_s",
                "peak_mem (max rank)", "max loss drift", "verdict"):
        table.add_column(col)
    best, best_time = None, base["median"]
    for patches, runs in records.items():
        row, passes = _row(manifest, patches, runs, base)
        table.add_row(*row)
        summary = _summary(runs)
        if patches and passes and summary["median"] < best_time:
            best, best_time = patches, summary["median"]
    out.print(table)
    if best is None:
        out.print("no patch beat the baseline within the loss tolerance in this run")
    else:
        speedup = base["median"] / best_time
        out.print(f"best: [bold]{'+'.join(best)}[/], {speedup:.2f}x faster per step than the "
                  "baseline. Single-machine timings are noisy: compare the spread.")


def _row(manifest, patches: tuple, runs: list[TrialRecord], base: dict) -> tuple[list, bool]:
    name = "+".join(patches) or "baseline"
    summary = _summary(runs)
    if summary is None:
        failed = next(r for r in runs if r.status is not TrialStatus.OK)
        return [name, "-", "-", "-", "-", "-", "-", f"{failed.status.value}"], False
    drift = max_rel_drift(summary["loss"], base["loss"])
    passes = drift <= manifest.invariants.loss_rtol
    verdict = "baseline" if not patches else ("ok" if passes else "loss drifts")
    return [name, f"{summary['median']:.4f}", f"{summary['min']:.4f}-{summary['max']:.4f}",
            f"{base['median'] / summary['median']:.2f}", f"{summary['tokens_per_s']:,.0f}",
            units.format_bytes(summary["peak"]), f"{drift:.1e}", verdict], passes
