"""The measured-table format (see ``bench/data/README.md``): read, write and summarise.

A table is one CSV per workload and host: every row is one real trial of one cell (a knob
assignment plus a patch subset). Knob columns are ``k_<knob>``; ``patches`` is the sorted patch
ids joined by ``+`` (empty for none). Rows with an empty ``mem_cap_bytes`` ran uncapped (their
peak is known); rows with a cap validate the replay rule "OOM at capacity C iff peak > C".
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from infrarsi.records.trial import TrialStatus

DATA = Path(__file__).parent / "data"
MANIFESTS = DATA / "manifests"  # drafted workloads whose tables are kept here

COLUMNS = [
    "table",
    "workload",
    "scale",
    "fingerprint",
    "cell",
    "repeat",
    "phase",
    "patches",
    "status",
    "step_time_s",
    "harness_step_time_s",
    "step_time_cv",
    "e2e_time_s",
    "startup_time_s",
    "cost_s",
    "peak_mem_bytes_max",
    "peak_mem_bytes_ranks",
    "analytic_peak_bytes",
    "patch_mem_ratio",
    "mem_cap_bytes",
    "ranks",
    "trial_id",
    "started_unix_s",
    "error",
    "design",
    "step_times_s",
    "rules_commit",
]
DESIGNS = ("full_factorial", "sampled")  # every cell of a space measured, or a random sample
KNOB_PREFIX = "k_"


def _num(text: str) -> float | None:
    return float(text) if text not in ("", None) else None


@dataclass
class Cell:
    """One configuration of a table and every uncapped repeat measured for it."""

    cell: str
    knobs: dict[str, str]
    patches: tuple[str, ...]
    status: list[str] = field(default_factory=list)
    step_time_s: list[float] = field(default_factory=list)
    cost_s: list[float] = field(default_factory=list)
    peak_mem_bytes: list[float] = field(default_factory=list)
    # each ok repeat's per-step times (empty lists where the table has no such column)
    per_step_s: list[list[float]] = field(default_factory=list)
    analytic_peak_bytes: float | None = None
    patch_mem_ratio: float = 1.0

    @property
    def ok(self) -> bool:
        """Every repeat ended ``ok`` (a cell that crashed or timed out is infeasible)."""
        return bool(self.status) and all(s == TrialStatus.OK for s in self.status)

    @property
    def mean_step_time_s(self) -> float:
        """The cell's true step time: the mean over its repeats."""
        return statistics.fmean(self.step_time_s) if self.step_time_s else math.inf

    @property
    def peak_bytes(self) -> float | None:
        """The cell's peak per rank: the largest over repeats (what a capacity must hold)."""
        return max(self.peak_mem_bytes) if self.peak_mem_bytes else None

    @property
    def mean_cost_s(self) -> float:
        """Mean wall seconds one trial of this cell cost."""
        return statistics.fmean(self.cost_s) if self.cost_s else 0.0


ANCHOR_PHASE = "anchor"  # a row of the baseline measured between blocks (``bench/gate.py``)


@dataclass
class Table:
    """A measured table: its cells (uncapped repeats) and its capped validation rows."""

    name: str
    workload: str
    fingerprint: str
    knob_names: list[str]
    cells: dict[str, Cell]
    validation: list[dict]
    baseline: str = "c000"
    margin: float = 1.0
    design: str = "sampled"
    # the baseline measured between blocks of rows (``bench/gate.py``): the host's speed over
    # the table, never a cell's repeat
    anchors: list[dict] = field(default_factory=list)

    def feasible(self, capacity: float | None = None) -> list[Cell]:
        """Cells that ran ``ok`` and, at ``capacity``, fit by the replay rule."""
        return [
            c
            for c in self.cells.values()
            if c.ok and (capacity is None or c.peak_bytes is None or c.peak_bytes <= capacity)
        ]

    def replay_capacity(self, oom_fraction: float) -> float:
        """The capacity a replay runs at, in the units of the cells' (margin-divided) peaks:
        the uncapped peaks' ``oom_fraction`` quantile — where the capped rows ran — so a cell
        whose peak lies between that and ``margin`` times it fits, as the capped rows showed.
        (The quantile of the divided peaks would pick the same cells as without a margin.)"""
        return self.capacity_for(oom_fraction) * self.margin

    def capacity_for(self, oom_fraction: float) -> float:
        """A per-rank capacity at which about ``oom_fraction`` of the ok cells are OOM."""
        peaks = sorted(c.peak_bytes for c in self.cells.values() if c.ok and c.peak_bytes)
        index = min(len(peaks) - 1, max(0, int(round((1 - oom_fraction) * len(peaks))) - 1))
        return (peaks[index] + peaks[min(index + 1, len(peaks) - 1)]) / 2


def read_rows(path: Path) -> list[dict]:
    """Every row of a table CSV as a dict of strings."""
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def load(path: Path) -> Table:
    """A table from its CSV; ValueError naming the file and column when it is malformed."""
    rows = read_rows(path)
    if not rows:
        raise ValueError(f"{path}: no rows")
    missing = [
        c
        for c in (
            "cell",
            "status",
            "step_time_s",
            "peak_mem_bytes_max",
            "cost_s",
            "patches",
            "mem_cap_bytes",
        )
        if c not in rows[0]
    ]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; see bench/data/README.md")
    knob_names = [c[len(KNOB_PREFIX) :] for c in rows[0] if c.startswith(KNOB_PREFIX)]
    cells: dict[str, Cell] = {}
    validation = []
    anchors = []
    for row in rows:
        if row.get("phase") == ANCHOR_PHASE:
            anchors.append(row)
            continue
        if row["mem_cap_bytes"]:
            validation.append(row)
            continue
        cell = cells.setdefault(
            row["cell"],
            Cell(
                row["cell"],
                {k: row[KNOB_PREFIX + k] for k in knob_names},
                tuple(p for p in row["patches"].split("+") if p),
                analytic_peak_bytes=_num(row.get("analytic_peak_bytes", "")),
                patch_mem_ratio=_num(row.get("patch_mem_ratio", "")) or 1.0,
            ),
        )
        cell.status.append(row["status"])
        if row["cost_s"]:
            cell.cost_s.append(float(row["cost_s"]))
        if row["status"] == TrialStatus.OK:
            cell.step_time_s.append(float(row["step_time_s"]))
            steps = row.get("step_times_s") or ""
            cell.per_step_s.append([float(t) for t in steps.split(";") if t])
            if row["peak_mem_bytes_max"]:
                cell.peak_mem_bytes.append(float(row["peak_mem_bytes_max"]))
    first = rows[0]
    cells = merge_twins(cells, first.get("workload", ""))
    baseline = min(cells) if "c000" not in cells else "c000"
    margin = replay_margin(cells, validation)
    for cell in cells.values():  # what a capacity must hold: the peak less what is reclaimable
        cell.peak_mem_bytes = [p / margin for p in cell.peak_mem_bytes]
    design = first.get("design") or "sampled"  # tables measured before the column: sampled
    return Table(
        Path(path).stem,
        first.get("workload", Path(path).stem),
        first.get("fingerprint", ""),
        knob_names,
        cells,
        validation,
        baseline,
        margin,
        design if design in DESIGNS else "sampled",
        anchors,
    )


def manifest_of(workload: str):
    """A table's workload manifest: a bundled workload by name, else a drafted one kept beside
    the tables (``data/manifests/<workload>/``: the manifest its user's script drafted, with
    the script); None for a workload this checkout has neither of."""
    from infrarsi.workloads import find

    for where in (workload, MANIFESTS / workload):
        try:
            return find(str(where))
        except Exception:  # not this one
            continue
    return None


def merge_twins(cells: dict[str, Cell], workload: str) -> dict[str, Cell]:
    """The cells with those that are one configuration merged into the first of them (its
    repeats pooled): two cells that differ only in a knob the workload declares inert there
    (``inert_when``: accum_no_sync at grad_accum 1) were one configuration measured twice,
    and a searcher that "reached" either only drew one of its draws. Unchanged for a workload
    this checkout does not ship."""
    from infrarsi.workloads.knobs import inert_at_default

    manifest = manifest_of(workload)
    if manifest is None:
        return cells
    if not any(k.inert_when for k in manifest.knobs):
        return cells
    kept: dict[tuple, Cell] = {}
    for cid in sorted(cells):
        cell = cells[cid]
        typed = {k: manifest.knob(k).coerce(v) for k, v in cell.knobs.items() if v != ""}
        canon = inert_at_default(manifest, typed, {})
        key = (tuple(sorted((k, str(v)) for k, v in canon.items())), cell.patches)
        if key not in kept:
            cell.knobs = {k: str(canon.get(k, v)) if v != "" else v for k, v in cell.knobs.items()}
            kept[key] = cell
            continue
        twin = kept[key]
        for name in ("status", "step_time_s", "cost_s", "peak_mem_bytes", "per_step_s"):
            getattr(twin, name).extend(getattr(cell, name))
    return {c.cell: c for c in kept.values()}


def replay_margin(cells: dict[str, Cell], validation: list[dict]) -> float:
    """How far above an uncapped peak a capacity is still enough, from the capped rows.

    An uncapped peak (the memory cgroup's high-water mark) includes page cache the kernel
    reclaims under a cap before it ends a rank, so a cell whose uncapped peak is a little above
    the capacity may still run. The margin is the midpoint between the largest peak/capacity
    that ran ``ok`` and the smallest that ran out of memory; where no capped row ran out of
    memory, the largest peak/capacity that ran ``ok`` (what is known to fit: a lower bound); 1.0
    when the rows do not separate cleanly, none ran ok above its cap, or there are none. The
    replay rule is then "OOM at C iff peak / margin > C", C the capped rows' own capacity
    (``Table.replay_capacity``).
    """
    ok, oom = [], []
    for row in validation:
        cell = cells.get(row["cell"])
        if cell is None or cell.peak_bytes is None:
            continue
        ratio = cell.peak_bytes / float(row["mem_cap_bytes"])
        (
            ok
            if row["status"] == TrialStatus.OK
            else oom
            if row["status"] == TrialStatus.OOM
            else []
        ).append(ratio)
    if not ok or max(ok) <= 1.0 or (oom and max(ok) >= min(oom)):
        return 1.0
    return (max(ok) + min(oom)) / 2 if oom else max(ok)


def append_row(path: Path, row: dict, knob_names: list[str]) -> None:
    """Append one trial's row (header first when the file is new); flushed before returning."""
    columns = COLUMNS[:8] + [KNOB_PREFIX + k for k in knob_names] + COLUMNS[8:]
    new = not path.exists()
    with open(path, "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow({c: "" if row.get(c) is None else row[c] for c in columns})
        handle.flush()


def rewrite(path: Path, rows: list[dict], columns: list[str] | None = None) -> None:
    """Replace a table's rows atomically (a killed rewrite leaves the old file)."""
    import os

    tmp = Path(path).with_suffix(".tmp")
    with open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns or list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def noise_cv(table: Table) -> float:
    """Median over ok cells of the coefficient of variation of their repeats' step times."""
    cvs = [
        statistics.stdev(c.step_time_s) / statistics.fmean(c.step_time_s)
        for c in table.cells.values()
        if c.ok and len(c.step_time_s) >= 2
    ]
    return statistics.median(cvs) if cvs else math.nan


def table_paths(given: list[str] | None) -> list[Path]:
    """The tables named on the command line, or every committed table."""
    if given:
        return [Path(p) for p in given]
    return sorted(DATA.glob("*.csv"))


def _table_settings(results: dict, table: str) -> dict | None:
    """The settings one table of a results file was measured with: the file's, with the seeds
    its ``details`` name."""
    settings = results.get("settings")
    detail = results.get("details", {}).get(table, {})
    if settings is None:
        return None
    return {
        **settings,
        **{k: detail[k] for k in ("seeds", "few_seeds") if k in detail and k in settings},
    }


def merge_results(path: Path, new: dict, recompute=None) -> dict:
    """The results file at ``path`` with what was just measured replacing its older entries,
    entry by entry within a table (the others stay); ``recompute(results_of_table)`` refreshes
    each merged table's ``details[table]["tests"]``. Entries of one table merge only when
    measured with the same settings as that table's entries: a table measured again with other
    settings (another number of seeds) starts afresh, the other tables stay. The top-level
    ``settings`` are the newest run's; a table's own are those with its ``details``' seeds
    (``seeds``, ``few_seeds``) in their place, so a table replayed again with the seeds it was
    measured with merges even after another table was measured with other seeds."""
    if not path.exists():
        return new
    try:
        old = json.loads(path.read_text())
    except json.JSONDecodeError:
        return new
    settings = json.loads(json.dumps(new.get("settings")))
    for table, per in new["results"].items():
        if _table_settings(old, table) != settings:
            old.get("results", {}).pop(table, None)
            old.get("details", {}).pop(table, None)
        old.setdefault("results", {}).setdefault(table, {}).update(per)
        detail = old.setdefault("details", {}).setdefault(table, {})
        detail.update(new.get("details", {}).get(table, {}))
        if recompute is not None:
            detail["tests"] = recompute(old["results"][table])
    for key, value in new.items():
        if key not in ("results", "details"):
            old[key] = value
    return old
