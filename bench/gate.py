"""The stationarity gate of a measured table: the baseline measured between every
``ANCHOR_EVERY`` rows (the anchors), and a block of rows whose two anchors moved more than the
host's run-to-run noise allows measured again — a table is a judge of searchers only where the
host's speed stood still while it was measured (issue 65: one table was measured across a 1.5x
step in the host's speed, and its ranks measured the host, not the search).

Pure functions: ``make_table.measure`` runs the trials. Constants set a priori (before any
table was measured under the gate) and listed in ``constants.json``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

ANCHOR_EVERY = 8  # rows between two measurements of the baseline
FIRST_ANCHORS = 3  # anchors measured before the first row: the host's run-to-run noise
GATE_Z = 3.0  # how many run-to-run sds (of a difference of two runs) two anchors may differ
GATE_MIN_LOG = math.log(1.10)  # and never less than a tenth: a finer gate re-measures forever
# nor more than a quarter: first anchors measured on a loaded host must not open the gate to
# steps like the 1.5x that made a table measure its host (a pilot beside CI: sd -> 2.98x)
GATE_MAX_LOG = math.log(1.25)
MAX_REMEASURES = 2  # a block measured again at most this often (then kept, and said)


@dataclass(frozen=True)
class Drift:
    """What a table's anchors say of the host over its measurement: the gate's threshold (log),
    the anchors' log times in order, the largest change between two neighbours, the blocks
    measured again and the blocks kept though they drifted (re-measured ``MAX_REMEASURES``
    times)."""

    threshold_log: float
    anchors_log: tuple[float, ...]
    largest_step_log: float
    remeasured: int
    kept_drifted: int

    def as_json(self) -> dict:
        return {
            "threshold_ratio": round(math.exp(self.threshold_log), 4),
            "anchors": len(self.anchors_log),
            "largest_step_ratio": round(math.exp(self.largest_step_log), 4),
            "anchor_range_ratio": round(
                math.exp(max(self.anchors_log) - min(self.anchors_log)) if self.anchors_log else 1,
                4,
            ),
            "blocks_remeasured": self.remeasured,
            "blocks_kept_drifted": self.kept_drifted,
        }


def threshold(first_logs: list[float]) -> float:
    """The most two anchors may differ (log) before their block is measured again:
    ``GATE_Z`` sds of the difference of two runs (the first anchors' sd times sqrt 2), within
    [``GATE_MIN_LOG``, ``GATE_MAX_LOG``]."""
    if len(first_logs) < 2:
        return GATE_MIN_LOG
    sd = statistics.stdev(first_logs)
    return min(GATE_MAX_LOG, max(GATE_MIN_LOG, GATE_Z * math.sqrt(2.0) * sd))


def drifted(before_log: float | None, after_log: float | None, limit_log: float) -> bool:
    """Whether the host's speed moved across a block: its anchors differ past ``limit_log``.
    An anchor that did not run ok (no time) says the host could not be read: drifted."""
    if before_log is None or after_log is None:
        return True
    return abs(after_log - before_log) > limit_log


def blocks(todo: list, size: int = ANCHOR_EVERY) -> list[list]:
    """``todo`` cut into blocks of ``size`` rows, in order."""
    return [todo[i : i + size] for i in range(0, len(todo), size)]


def drift_of(anchor_logs: list[float], limit_log: float, remeasured: int, kept: int) -> Drift:
    """The table's drift from its anchors' log times in order."""
    steps = [abs(b - a) for a, b in zip(anchor_logs, anchor_logs[1:])]
    return Drift(limit_log, tuple(anchor_logs), max(steps, default=0.0), remeasured, kept)


def gated(
    todo: list[tuple[int, int]],
    run_row: Callable[[int, int], tuple[str, float | None]],
    run_anchor: Callable[[], float | None],
    drop: Callable[[list[str]], None],
) -> Drift:
    """Run ``todo`` (cell, repeat) in blocks of ``ANCHOR_EVERY`` rows, the baseline measured
    (``run_anchor``: its log step time, None unless ok) before the first (``FIRST_ANCHORS``
    times: the noise) and after each block; a block whose two anchors differ past the gate's
    threshold is dropped (``drop``: its rows' trial ids) and measured again, at most
    ``MAX_REMEASURES`` times (then kept, and counted). ``run_row``: (trial id, log time)."""
    first = [run_anchor() for _ in range(FIRST_ANCHORS)] if todo else []
    limit = threshold([a for a in first if a is not None])
    logs = list(first)
    queue = [(block, 0) for block in blocks(todo)]
    remeasured = kept = 0
    while queue:
        block, tries = queue.pop(0)
        ids = [run_row(c, r)[0] for c, r in block]
        after = run_anchor()
        if drifted(logs[-1] if logs else None, after, limit):
            if tries < MAX_REMEASURES:
                drop(ids)
                queue.insert(0, (block, tries + 1))
                remeasured += 1
            else:
                kept += 1
        logs.append(after)
    return drift_of([a for a in logs if a is not None], limit, remeasured, kept)
