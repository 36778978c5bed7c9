"""Measure a workload's table: real trials of many cells, repeated, in random interleaved order.

    .venv/bin/python bench/make_table.py dense-1node                 # 100 cells x 2 repeats
    .venv/bin/python bench/make_table.py moe-1node --cells 96 --repeats 2 --validate 16
    .venv/bin/python bench/make_table.py path/to/workload.yaml --scale full --factor ...  # drafted

Cells are a seeded random fraction of the full factorial over the knobs that matter (ranks up
to the cores, threads, micro-batch with derived accumulation, precision, checkpointing, the
workload's communication knobs; ``compile`` stays off: one compile costs more than a whole trial
here) times patch subsets; cell ``c000`` is the baseline (the manifest's defaults, no patch).
Every (cell, repeat) runs uncapped, in one random order, so slow phases of a shared machine hit
every cell alike, and under a stationarity gate (``bench/gate.py``): the baseline measured
before the first row and after every block of rows, a block whose anchors moved more than the
host's noise allows measured again, and the table's drift written beside it
(``<table>.drift.json``). Then the replay rule "OOM at capacity C iff peak > C" is checked
under a real cap on cells nearest a capacity C where ~30% of cells are OOM.

The table is ``bench/data/<workload>-<fingerprint>.csv``; a run resumes where it stopped while
the host's fingerprint is the same, and a new host writes a new table beside the old one.

``--factor KNOB=V1,V2`` (repeatable) and ``--patch-sets SET;SET`` measure a *full factorial*
instead: every combination of the factors' values (other knobs at their defaults, derived ones
derived) times every patch set, each cell at least ``--repeats`` times, into
``<workload>-full-<fingerprint>.csv`` — a table whose every cell a searcher may ask for:

    .venv/bin/python bench/make_table.py dense-1node --factor nproc=1,2 \
        --factor micro_batch=1,2,4 --factor precision=fp32,bf16 \
        --factor activation_checkpointing=false,true --patch-sets ";sdpa_attention" --repeats 5
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import gate  # noqa: E402
import tables  # noqa: E402

from infrarsi.host import fingerprint, machine_facts, usable_threads  # noqa: E402
from infrarsi.run.problem_build import patch_sets  # noqa: E402
from infrarsi.trial import TrialStatus, prepare, run_trial  # noqa: E402
from infrarsi.workloads import expr, find, knobs  # noqa: E402
from infrarsi.workloads.knobs import AssignmentError  # noqa: E402

SCALE = "bench"
OOM_FRACTION = 0.3
# what a new table's rules are: the search and the benchmark's scoring and replay (not its
# peers, bench/peers.py: a peer added later changes no rule)
FROZEN = (
    "src/infrarsi/run",
    "bench/replay.py",
    "bench/scoring.py",
    "bench/models.py",
    "bench/tables.py",
    "bench/constants.json",
)


def factor_levels(manifest, cores: int) -> dict[str, list]:
    """The values each measured knob takes in the design (derived knobs are left to derive)."""
    levels = {}
    for knob in manifest.knobs:
        if knob.role in ("grad_accum", "compile"):  # accumulation follows; compile stays off
            continue
        values = list(knob.values) if knob.values else [False, True]
        if knob.role in ("ranks", "threads"):
            values = [v for v in values if v <= cores]
        levels[knob.name] = values
    return levels


def patch_subsets(manifest) -> list[tuple[str, ...]]:
    """Every conflict-free subset of the catalog, in catalog order."""
    order = [p.id for p in manifest.patches]
    return [tuple(sorted(s, key=order.index)) for s in patch_sets(manifest)]


def design(
    manifest, n_cells: int, seed: int, cores: int, scale: str = SCALE
) -> list[tuple[dict, tuple]]:
    """The baseline cell, then distinct valid random cells: (knob overrides, patch subset)."""
    rng = random.Random(seed)
    levels, subsets = factor_levels(manifest, cores), patch_subsets(manifest)
    cells, seen = [({}, ())], {_key(knobs.resolve(manifest, scale, {}), ())}
    attempts = 0
    while len(cells) < n_cells and attempts < 100 * n_cells:
        attempts += 1
        overrides = {name: rng.choice(values) for name, values in levels.items()}
        subset = rng.choice(subsets)
        try:
            resolved = knobs.resolve(manifest, scale, overrides)
        except AssignmentError:
            continue
        if _key(resolved, subset) not in seen:
            seen.add(_key(resolved, subset))
            cells.append((overrides, subset))
    return cells


def full_factorial(
    manifest, factors: dict[str, list], patch_sets: list[tuple], scale: str = SCALE
) -> list[tuple[dict, tuple]]:
    """Every combination of the factors' values times every patch set, baseline first; a
    combination the manifest's constraints refuse is left out (said on stderr)."""
    import itertools

    base = knobs.resolve(manifest, scale, {})
    cells, seen = [({}, ())], {_key(base, ())}
    names = list(factors)
    for values in itertools.product(*(factors[n] for n in names)):
        overrides = {n: v for n, v in zip(names, values) if v != base.get(n)}
        for subset in patch_sets:
            try:
                resolved = knobs.resolve(manifest, scale, overrides)
            except AssignmentError as exc:
                print(f"  left out {overrides} {subset}: {exc}", file=sys.stderr)
                continue
            if _key(resolved, subset) not in seen:
                seen.add(_key(resolved, subset))
                cells.append((overrides, subset))
    return cells


def parse_factor(manifest, text: str) -> tuple[str, list]:
    """``KNOB=V1,V2`` as the knob's name and its typed values (ValueError naming the fix)."""
    name, _, values = text.partition("=")
    knob = manifest.knob(name.strip())  # KeyError names the knob
    out = []
    for raw in values.split(","):
        raw = raw.strip()
        if knob.type == "bool":
            out.append(raw.lower() in ("1", "true", "yes", "on"))
        elif knob.type == "int":
            out.append(int(raw))
        elif knob.type == "float":
            out.append(float(raw))
        else:
            out.append(raw)
    if not out:
        raise ValueError(f"--factor {text!r}: give KNOB=V1,V2")
    return knob.name, out


def _key(resolved: dict, subset: tuple) -> tuple:
    return tuple(sorted(resolved.items())), tuple(sorted(subset))


def analytic_peak_bytes(manifest, resolved: dict, scale: str = SCALE) -> float | None:
    """The manifest's analytic per-rank peak for this assignment (None without a formula)."""
    if manifest.memory is None:
        return None
    return float(
        expr.evaluate(manifest.memory.per_rank_bytes, {**manifest.scale(scale).params, **resolved})
    )


def patch_mem_ratio(manifest, subset: tuple) -> float:
    """Product of the patches' prior peak-memory ratios."""
    return math.prod(manifest.patch(p).prior.peak_mem_ratio for p in subset)


def trial_row(
    table, manifest, fp, where: tuple[str, int, str], spec, subset, record, design: str
) -> dict:
    """One CSV row from a trial record; ``where``: (cell id, repeat, phase); ``design``: the
    table's (``full_factorial`` or ``sampled``)."""
    cell_id, repeat, phase = where
    m = record.metrics
    peaks = [b for b in (m.peak_mem_bytes if m else []) if b is not None]
    row = {
        "table": table,
        "design": design,
        "workload": manifest.name,
        "scale": spec.scale,
        "fingerprint": fp,
        "cell": cell_id,
        "repeat": repeat,
        "phase": phase,
        "patches": "+".join(sorted(subset)),
        "status": record.status.value,
        "cost_s": round(record.cost_s, 3),
        "analytic_peak_bytes": analytic_peak_bytes(manifest, spec.knobs, spec.scale),
        "patch_mem_ratio": patch_mem_ratio(manifest, subset),
        "mem_cap_bytes": spec.mem_cap_bytes,
        "trial_id": record.trial_id,
        "started_unix_s": round(record.started_unix_s, 3),
        "error": (record.error or "")[:200].replace("\n", " "),
    }
    row.update({tables.KNOB_PREFIX + k: v for k, v in spec.knobs.items()})
    if m is not None:
        row.update(
            step_time_s=m.step_time_s,
            harness_step_time_s=m.harness_step_time_s,
            step_time_cv=round(m.step_time_cv, 5),
            e2e_time_s=m.e2e_time_s,
            startup_time_s=m.startup_time_s,
            ranks=m.ranks,
            peak_mem_bytes_max=max(peaks) if peaks else None,
            peak_mem_bytes_ranks=";".join(str(b) for b in m.peak_mem_bytes),
            step_times_s=";".join(f"{t:.6f}" for t in m.step_times_s),
        )
    return row


def table_path(out_dir: Path, name: str, full: bool = False, label: str | None = None) -> Path:
    """Where the table of the workload called ``name`` (the manifest's name, never a path the
    user gave: a manifest path has slashes) is kept for this host: ``<name>-<fp>.csv`` for a
    sampled design, ``<name>-full-<fp>.csv`` for a full factorial, ``<name>-<label>-<fp>.csv``
    for a full factorial with a label of its own (a second design on one host)."""
    kind = f"-{label}" if label else "-full" if full else ""
    return Path(out_dir) / f"{name}{kind}-{fingerprint(machine_facts(usable_threads()))}.csv"


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """A git command in ``root``'s repository, its output captured."""
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=check
    )


def rules_commit(root: Path = Path(__file__).resolve().parents[1]) -> str:
    """The commit whose rules a new table will judge: HEAD, refused (ValueError saying what to
    do) while the search's code or the benchmark's rules differ from it — a table measured
    then could not say which rules were frozen before it."""
    dirty = _git(root, "status", "--porcelain", "--", *FROZEN).stdout.strip()
    if dirty:
        raise ValueError(
            f"uncommitted changes to the frozen rules ({', '.join(FROZEN)}):\n{dirty}\n"
            "commit them first (the table then judges that commit), or give --pilot for a "
            "pilot that judges nothing"
        )
    return _git(root, "rev-parse", "HEAD").stdout.strip()


@dataclass(frozen=True)
class TablePlan:
    """What a table measures: a sampled design (``n_cells``) or the full factorial of
    ``factors`` times ``patch_sets``; ``repeats`` per cell, ``n_validate`` capped checks;
    ``label`` names a second full-factorial design on one host; ``pilot`` measures without
    freezing the rules (a pilot judges nothing); ``scale`` is the manifest's scale the trials run
    at (``bench`` for the bundled workloads; a drafted manifest has its user's run as ``full``)."""

    n_cells: int = 100
    repeats: int = 2
    n_validate: int = 16
    seed: int = 0
    factors: dict | None = None
    patch_sets: list[tuple] | None = None
    label: str | None = None
    pilot: bool = False
    scale: str = SCALE


def measure(workload: str, plan: TablePlan, out_dir: Path) -> Path:
    """Measure (or resume) the table of ``workload`` on this host; returns its path."""
    manifest = find(workload)
    fp = fingerprint(machine_facts(usable_threads()))
    path = table_path(out_dir, manifest.name, full=bool(plan.factors), label=plan.label)
    name = path.stem
    commit = "pilot" if plan.pilot else rules_commit()
    if path.exists():
        same_rules(path, commit)
    kind = "full_factorial" if plan.factors else "sampled"
    cells = (
        full_factorial(manifest, plan.factors, plan.patch_sets or [()], plan.scale)
        if plan.factors
        else design(manifest, plan.n_cells, plan.seed, usable_threads(), plan.scale)
    )
    done = (
        {(r["cell"], r["repeat"], r["phase"]) for r in tables.read_rows(path)}
        if path.exists()
        else set()
    )
    order = [(c, r) for c in range(len(cells)) for r in range(plan.repeats)]
    random.Random(plan.seed + 1).shuffle(order)
    todo = [(c, r) for c, r in order if (f"c{c:03d}", str(r), "grid") not in done]
    print(
        f"{name}: {len(cells)} cells x {plan.repeats} repeats, {len(order) - len(todo)} done, "
        f"{len(todo)} to run (rules: {commit})",
        file=sys.stderr,
        flush=True,
    )
    knob_names = [k.name for k in manifest.knobs]
    with tempfile.TemporaryDirectory(prefix="infrarsi-table-") as workdir:
        t0, ran, anchors = (
            time.monotonic(),
            [0],
            [len(tables.load(path).anchors) if path.exists() else 0],
        )

        def run_row(c: int, r: int, phase: str = "grid") -> tuple[str, float | None]:
            """One row of cell ``c`` (its repeat ``r``, or the anchor's count): its trial id
            and its log step time (None unless ok)."""
            overrides, subset = cells[c]
            spec = prepare(manifest, plan.scale, overrides, list(subset), evaluate=False)
            record = run_trial(spec, Path(workdir))
            where = (f"c{c:03d}", r, phase)
            row = trial_row(name, manifest, fp, where, spec, subset, record, kind)
            tables.append_row(path, {**row, "rules_commit": commit}, knob_names)
            if phase == "grid":
                ran[0] += 1
                _progress(ran[0] - 1, len(todo), t0, f"c{c:03d}/{r}", record)
            _clean(Path(workdir), record)
            ok = record.status is TrialStatus.OK and record.metrics
            return record.trial_id, math.log(record.metrics.step_time_s) if ok else None

        def run_anchor() -> float | None:
            anchors[0] += 1
            return run_row(0, anchors[0] - 1, tables.ANCHOR_PHASE)[1]  # c000: the baseline

        def drop(ids: list[str]) -> None:  # a drifted block's rows: measured again
            rows = tables.read_rows(path)
            tables.rewrite(path, [r for r in rows if r["trial_id"] not in ids], list(rows[0]))

        drift = gate.gated(todo, run_row, run_anchor, drop)
        path.with_suffix(".drift.json").write_text(json.dumps(drift.as_json(), indent=1) + "\n")
        print(f"{name}: drift {drift.as_json()}", file=sys.stderr, flush=True)
        where = (fp, commit, plan.scale)
        validate(manifest, path, cells, plan.n_validate, where, Path(workdir), knob_names)
    refresh_analytic(manifest, path, cells, plan.scale)
    return path


def same_rules(path: Path, commit: str, root: Path = Path(__file__).resolve().parents[1]) -> None:
    """Refuse to resume a table under other rules than those it was started under (a
    ValueError naming both commits); a pilot resumes only as a pilot."""
    started = {r.get("rules_commit") or "" for r in tables.read_rows(path)} - {""}
    for before in started - {commit}:
        if "pilot" in (before, commit):
            raise ValueError(
                f"{path.name}: started as {before}, resumed as {commit}: not one table"
            )
        changed = _git(
            root, "diff", "--quiet", before, commit, "--", *FROZEN, check=False
        ).returncode
        if changed:
            raise ValueError(
                f"{path.name} was started under the rules of {before[:10]}; they changed by "
                f"{commit[:10]}: measure a new table (--label) for the new rules"
            )


def refresh_analytic(manifest, path: Path, cells, scale: str = SCALE) -> None:
    """Rewrite every row's analytic estimate and patch ratio from the manifest as it is now
    (a corrected formula must not leave stale priors in a table; the measurements stay)."""
    rows = tables.read_rows(path)
    for row in rows:
        overrides, subset = cells[int(row["cell"][1:])]
        resolved = knobs.resolve(manifest, scale, overrides)
        row["analytic_peak_bytes"] = analytic_peak_bytes(manifest, resolved, scale)
        row["patch_mem_ratio"] = patch_mem_ratio(manifest, subset)
    tables.rewrite(path, rows)


def validate(manifest, path, cells, n_validate, where, workdir, knob_names) -> None:
    """Run the cells nearest a ~30%-OOM capacity under that real cap (resumable); ``where``:
    (the host's fingerprint, the rules' commit the rows name, the scale)."""
    fp, commit, scale = where
    table = tables.load(path)
    done = {row["cell"] for row in table.validation}
    if len(done) >= n_validate:
        return
    capacity = int(table.capacity_for(OOM_FRACTION))
    ok = [c for c in table.cells.values() if c.ok and c.peak_bytes]
    # nearest cells on each side, skipping those whose repeats straddle the capacity
    clear = [c for c in ok if min(c.peak_mem_bytes) > capacity or max(c.peak_mem_bytes) <= capacity]
    below = sorted((c for c in clear if c.peak_bytes <= capacity), key=lambda c: -c.peak_bytes)
    above = sorted((c for c in clear if c.peak_bytes > capacity), key=lambda c: c.peak_bytes)
    chosen = below[: n_validate // 2] + above[: n_validate - n_validate // 2]
    print(
        f"{table.name}: validating the replay rule at {capacity} bytes per rank on "
        f"{len(chosen)} cells",
        file=sys.stderr,
        flush=True,
    )
    t0 = time.monotonic()
    for i, cell in enumerate(c for c in chosen if c.cell not in done):
        overrides, subset = cells[int(cell.cell[1:])]
        spec = prepare(
            manifest, scale, overrides, list(subset), evaluate=False, mem_cap_bytes=capacity
        )
        record = run_trial(spec, workdir)
        row = trial_row(
            table.name, manifest, fp, (cell.cell, 0, "validate"), spec, subset, record, table.design
        )
        tables.append_row(path, {**row, "rules_commit": commit}, knob_names)
        _progress(i, len(chosen), t0, f"{cell.cell} capped", record)
        _clean(workdir, record)


def _progress(i, total, t0, what, record) -> None:
    elapsed = time.monotonic() - t0
    eta = elapsed / (i + 1) * (total - i - 1)
    m = record.metrics
    print(
        f"  [{i + 1}/{total}] {what}: {record.status.value} "
        f"{m.step_time_s if m else '-'} s/step, cost {record.cost_s:.1f} s, eta {eta / 60:.0f} min",
        file=sys.stderr,
        flush=True,
    )


def _clean(workdir: Path, record) -> None:
    """A table keeps rows, not trial folders (weights and logs would fill the disk)."""
    import shutil

    if record.status is not TrialStatus.CRASH:
        shutil.rmtree(workdir / record.trial_id, ignore_errors=True)


def drop_rows_during(path: Path, windows: list[tuple[float, float]]) -> int:
    """Remove the rows whose trial overlapped a window when other work ran on this machine
    (``--drop-during LOG``: lines ``START END what`` in Unix seconds); a resumed measurement
    then measures them again. Returns how many rows were dropped."""
    rows = tables.read_rows(path)

    def overlaps(row):
        start = float(row["started_unix_s"])
        end = start + float(row["cost_s"] or 0)
        return any(start < w_end and end > w_start for w_start, w_end in windows)

    keep = [r for r in rows if not overlaps(r)]
    tables.rewrite(path, keep, list(rows[0]))
    return len(rows) - len(keep)


def read_windows(path: Path) -> list[tuple[float, float]]:
    """The ``START END ...`` lines of a log of other work (Unix seconds); other lines (a
    command's text that ran over several lines) are skipped."""
    out = []
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        try:
            out.append((float(parts[0]), float(parts[1])))
        except (IndexError, ValueError):
            continue
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workload")
    parser.add_argument("--cells", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--validate", type=int, default=16, help="capped replay-rule checks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--scale",
        default=SCALE,
        help="the manifest's scale to measure at (default bench; a drafted manifest's user run "
        "is its 'full' scale)",
    )
    parser.add_argument("--out", type=Path, default=tables.DATA)
    parser.add_argument(
        "--factor",
        action="append",
        default=[],
        help="KNOB=V1,V2: measure the full factorial of these factors",
    )
    parser.add_argument(
        "--patch-sets",
        default="",
        help="with --factor: patch sets separated by ';', each a '+'-joined "
        "list of catalog ids ('' is no patch), e.g. ';sdpa_attention'",
    )
    parser.add_argument(
        "--drop-during",
        type=Path,
        help="a log of windows (START END ...) when other work ran: their rows are measured again",
    )
    parser.add_argument(
        "--label",
        help="with --factor: name this full factorial <workload>-<LABEL>-<fingerprint>.csv "
        "(a second design on one host)",
    )
    parser.add_argument(
        "--pilot",
        action="store_true",
        help="measure without the rules committed (a pilot says whether a space is "
        "informative; it judges no rules)",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = find(args.workload)
    if args.scale not in manifest.scales:
        parser.error(f"--scale {args.scale}: {manifest.name} has {', '.join(manifest.scales)}")
    factors = dict(parse_factor(manifest, f) for f in args.factor)
    patch_sets = [tuple(p for p in s.split("+") if p) for s in args.patch_sets.split(";")]
    for subset in patch_sets:
        for pid in subset:
            manifest.patch(pid)  # KeyError names an unknown patch before anything runs
    if args.drop_during:
        windows = read_windows(args.drop_during)
        path = table_path(args.out, manifest.name, full=bool(factors), label=args.label)
        if path.exists():
            print(
                f"dropped {drop_rows_during(path, windows)} rows measured while other work ran",
                file=sys.stderr,
            )
    plan = TablePlan(
        args.cells,
        args.repeats,
        args.validate,
        args.seed,
        factors,
        patch_sets,
        args.label,
        args.pilot,
        args.scale,
    )
    path = measure(args.workload, plan, args.out)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
