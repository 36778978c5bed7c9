"""The report's figures (matplotlib, Agg): each a function from plain data to PNG bytes, so the
Markdown report links the files and the HTML report embeds the same bytes."""

from __future__ import annotations

import io
import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from infrarsi.records.trial import TrialStatus
from infrarsi.store import StoredTrial

STATUS_STYLE = {  # marker and colour per status (a str enum: its value finds it too)
    TrialStatus.OK: ("o", "tab:blue"),
    TrialStatus.OOM: (">", "tab:red"),
    TrialStatus.TIMEOUT: ("s", "tab:orange"),
    TrialStatus.CRASH: ("x", "tab:gray"),
    TrialStatus.INVALID: ("x", "tab:purple"),
    TrialStatus.SLOW: ("^", "tab:brown"),
}


def _finish(ax, xlabel: str, ylabel: str, title: str, legend: bool = True) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(fontsize=7)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


RANKED = "ranked_time_per_step_s"  # what the search ranks by: the objective's time per step


def _ranked_or_nan(t: StoredTrial, objective: str) -> float:
    ranked = t.ranked_time_per_step_s(objective)
    return math.nan if ranked is None else ranked


def best_so_far(trials: list[StoredTrial], objective: str) -> bytes:
    """The objective's time per step of every trial in order (what the search ranks by),
    failures marked on the axis, and the best so far."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ok: list[tuple[int, float]] = [
        (i + 1, ranked)
        for i, t in enumerate(trials)
        if t.status == TrialStatus.OK
        and (ranked := t.ranked_time_per_step_s(objective)) is not None
    ]
    best, line, times = math.inf, [], dict(ok)
    for i in range(1, len(trials) + 1):
        best = min(best, times.get(i, math.inf))
        line.append(best if math.isfinite(best) else np.nan)
    xs = np.arange(1, len(trials) + 1)
    if ok:
        ax.scatter(
            [x for x, _ in ok], [y for _, y in ok], s=18, color="tab:blue", label="trial (ok)"
        )
    floor = min((y for _, y in ok), default=1.0)
    slow = [
        (i + 1, t.censored_time_per_step_s)
        for i, t in enumerate(trials)
        if t.status == TrialStatus.SLOW and t.censored_time_per_step_s
    ]
    if slow:  # right-censored: cut short there, its time at least that
        marker, colour = STATUS_STYLE[TrialStatus.SLOW]
        ax.scatter(
            [x for x, _ in slow],
            [y for _, y in slow],
            marker=marker,
            color=colour,
            label="slow: cut short (time at least this)",
        )
    for status in (s for s in TrialStatus if s.is_failure()):
        pts = [i + 1 for i, t in enumerate(trials) if t.status == status]
        if pts:
            marker, colour = STATUS_STYLE[status]
            ax.scatter(pts, [floor * 0.9] * len(pts), marker=marker, color=colour, label=status)
    ax.step(xs, line, where="post", color="black", label="best so far")
    _finish(ax, "trial", RANKED, "Search: the objective's time per step and best so far")
    return _png(fig)


def time_vs_memory(trials: list[StoredTrial], objective: str, capacity_bytes: int | None) -> bytes:
    """The objective's time per step against peak memory per rank; OOM trials at the capacity
    (right-censored, their time unknown: drawn at its prediction, on the same quantity), each
    trial's predicted peak beside its measured one."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ok = [
        t
        for t in trials
        if t.status == TrialStatus.OK
        and t.peak_mem_bytes
        and t.ranked_time_per_step_s(objective) is not None
    ]
    mib = 2**20
    peaks: tuple[tuple[str, dict[str, Any]], ...] = (  # measured, then predicted at proposal
        ("peak_mem_bytes", {"color": "tab:blue", "label": "ok: measured peak"}),
        (
            "predicted_peak_bytes",
            {
                "facecolors": "none",
                "edgecolors": "tab:green",
                "label": "predicted peak at proposal",
            },
        ),
    )
    for field, style in peaks:
        shown = [t for t in ok if getattr(t, field)]
        if shown:
            xs = [getattr(t, field) / mib for t in shown]
            ax.scatter(xs, [_ranked_or_nan(t, objective) for t in shown], s=18, **style)
    typical = float(np.median([_ranked_or_nan(o, objective) for o in ok])) if ok else 1.0
    y_oom = [
        t.predicted_ranked_time_per_step_s or typical for t in trials if t.status == TrialStatus.OOM
    ]
    if capacity_bytes:
        ax.axvline(
            capacity_bytes / mib,
            color="tab:red",
            linestyle="--",
            label="capacity = predicted boundary (P(OOM) = 0.5)",
        )
        if y_oom:
            ax.scatter(
                [capacity_bytes / mib] * len(y_oom),
                y_oom,
                marker=">",
                color="tab:red",
                label="oom (peak > capacity; predicted step time)",
            )
    _finish(
        ax,
        "peak_mem_bytes per rank (MiB)",
        RANKED,
        "The objective's time per step vs peak memory of every trial",
    )
    return _png(fig)


def phases(before: dict[str, float], after: dict[str, float]) -> bytes:
    """Seconds per steady step by phase, baseline vs winner, stacked."""
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    names = sorted(set(before) | set(after))
    bottoms = np.zeros(2)
    for name in names:
        values = np.array([before.get(name, 0.0), after.get(name, 0.0)])
        ax.bar(["baseline", "winner"], values, bottom=bottoms, label=name)
        bottoms += values
    _finish(ax, "", "seconds per steady step (slowest rank)", "Phases before vs after")
    return _png(fig)


def loss_curves(baseline: list[float], winner: list[float]) -> bytes:
    """The training loss of the baseline and the winner, step by step."""
    fig, ax = plt.subplots(figsize=(5.6, 3.4))
    ax.plot(range(1, len(baseline) + 1), baseline, marker="o", label="baseline")
    ax.plot(range(1, len(winner) + 1), winner, marker="x", linestyle="--", label="winner")
    _finish(ax, "optimizer step", "loss", "Loss: baseline vs winner")
    return _png(fig)


def _mib(size: float | None) -> float:
    return (size or 0.0) / 2**20


def memory_calibration(trials: list[StoredTrial], capacity_bytes: int | None) -> bytes:
    """Left: predicted vs measured peak (OOM trials drawn at the capacity, censored). Right:
    the predicted P(OOM) in bins against the observed OOM frequency."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.4, 3.6))
    mib = 2**20
    ok = [
        t
        for t in trials
        if t.status == TrialStatus.OK and t.predicted_peak_bytes and t.peak_mem_bytes
    ]
    if ok:
        left.scatter(
            [_mib(t.predicted_peak_bytes) for t in ok],
            [_mib(t.peak_mem_bytes) for t in ok],
            s=18,
            label="ok",
        )
    oom = [t for t in trials if t.status == TrialStatus.OOM and t.predicted_peak_bytes]
    if oom and capacity_bytes:
        left.scatter(
            [_mib(t.predicted_peak_bytes) for t in oom],
            [capacity_bytes / mib] * len(oom),
            marker="^",
            color="tab:red",
            label="oom (peak above this)",
        )
    values = [_mib(t.predicted_peak_bytes) for t in ok + oom]
    values += [_mib(t.peak_mem_bytes) for t in ok]
    if values:
        lo, hi = min(values) * 0.9, max(values) * 1.1
        left.plot([lo, hi], [lo, hi], color="black", linewidth=0.8, label="measured = predicted")
    _finish(left, "predicted peak (MiB)", "measured peak (MiB)", "Memory: predicted vs measured")
    told = [
        t
        for t in trials
        if t.status in (TrialStatus.OK, TrialStatus.OOM) and t.predicted_p_oom is not None
    ]
    edges = np.linspace(0, 1, 6)
    for a, b in zip(edges[:-1], edges[1:]):
        inside = [
            t for t in told if a <= (p := t.predicted_p_oom or 0.0) < b or (b == 1 and p == 1)
        ]
        if inside:
            freq = np.mean([t.status == TrialStatus.OOM for t in inside])
            right.scatter([(a + b) / 2], [freq], s=12 + 6 * len(inside), color="tab:blue")
    right.plot([0, 1], [0, 1], color="black", linewidth=0.8)
    right.set_xlim(0, 1)
    right.set_ylim(-0.05, 1.05)
    _finish(
        right,
        "predicted P(OOM) (bin centre; size = trials)",
        "observed OOM frequency",
        "P(OOM) calibration",
        legend=False,
    )
    return _png(fig)
