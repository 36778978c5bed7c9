"""The measured-table tooling: the design of cells and the CSV format (pure, fast)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import make_table  # noqa: E402
import tables  # noqa: E402

from infrarsi.workloads import find, knobs  # noqa: E402


@pytest.mark.parametrize("workload", ["dense-1node", "moe-2node"])
def test_the_design_is_the_baseline_then_distinct_valid_cells(workload):
    manifest = find(workload)
    cells = make_table.design(manifest, 96, seed=0, cores=2)
    assert len(cells) == 96
    assert cells[0] == ({}, ())
    keys = {make_table._key(knobs.resolve(manifest, "bench", o), p) for o, p in cells}
    assert len(keys) == 96
    for overrides, _subset in cells:
        resolved = knobs.resolve(manifest, "bench", overrides)  # raises when invalid
        assert resolved.get("compile", "off") == "off"
        assert make_table.analytic_peak_bytes(manifest, resolved) > 0
    assert cells == make_table.design(manifest, 96, seed=0, cores=2)  # resumable: same design


def test_rows_round_trip_and_cells_gather_their_repeats(tmp_path):
    path = tmp_path / "t.csv"
    base = {
        "table": "t",
        "workload": "w",
        "cell": "c000",
        "phase": "grid",
        "patches": "",
        "status": "ok",
        "cost_s": 5.0,
        "mem_cap_bytes": None,
        "analytic_peak_bytes": 1e8,
        "patch_mem_ratio": 1.0,
        "k_a": 1,
    }
    rows = [
        dict(base, repeat=0, step_time_s=0.5, peak_mem_bytes_max=2e8),
        dict(base, repeat=1, step_time_s=0.7, peak_mem_bytes_max=2.2e8),
        dict(
            base,
            cell="c001",
            patches="p+q",
            repeat=0,
            step_time_s=0.4,
            peak_mem_bytes_max=3e8,
            k_a=2,
        ),
        dict(
            base,
            cell="c001",
            patches="p+q",
            repeat=0,
            phase="validate",
            status="oom",
            mem_cap_bytes=2.5e8,
            cost_s=2.0,
            k_a=2,
        ),
    ]
    for row in rows:
        tables.append_row(path, {k.replace("k_", "k_"): v for k, v in row.items()}, ["a"])
    table = tables.load(path)
    assert table.baseline == "c000" and table.knob_names == ["a"]
    assert table.cells["c000"].mean_step_time_s == pytest.approx(0.6)
    assert table.cells["c000"].peak_bytes == 2.2e8
    assert table.cells["c001"].patches == ("p", "q")
    assert len(table.validation) == 1
    assert [c.cell for c in table.feasible(2.5e8)] == ["c000"]
    assert table.capacity_for(0.5) == pytest.approx(2.6e8)


def test_a_table_without_the_needed_columns_is_refused_by_name(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("cell,status\nc000,ok\n")
    with pytest.raises(ValueError, match="step_time_s"):
        tables.load(path)


def test_the_replay_margin_separates_the_capped_rows_or_is_one():
    cells = {
        name: tables.Cell(name, {}, (), peak_mem_bytes=[peak])
        for name, peak in (("a", 100.0), ("b", 102.0), ("c", 106.0))
    }
    row = lambda cell, status: {"cell": cell, "status": status, "mem_cap_bytes": "100"}  # noqa
    assert tables.replay_margin(
        cells, [row("a", "ok"), row("b", "ok"), row("c", "oom")]
    ) == pytest.approx(1.04)
    assert tables.replay_margin(cells, [row("b", "oom"), row("c", "ok")]) == 1.0  # no clean cut
    assert tables.replay_margin(cells, []) == 1.0
    # none ran out of memory: what ran ok above its cap is known to fit
    assert tables.replay_margin(cells, [row("a", "ok"), row("c", "ok")]) == pytest.approx(1.06)
    assert tables.replay_margin(cells, [row("a", "ok")]) == 1.0


def test_a_cell_whose_peak_lies_within_the_margin_over_the_capped_rows_capacity_fits():
    peaks = {"c000": 100.0, "c001": 200.0, "c002": 300.0, "c003": 310.0, "c004": 400.0}
    cells = {
        name: tables.Cell(name, {}, (), status=["ok"], peak_mem_bytes=[peak / 1.05])
        for name, peak in peaks.items()
    }
    table = tables.Table("t", "w", "", [], cells, [], margin=1.05)
    capacity = table.capacity_for(0.4)  # between the divided peaks of c002 and c003
    assert {c.cell for c in table.feasible(capacity)} == {"c000", "c001", "c002"}
    # at the capped rows' own capacity (305 in the peaks' units) c003 fits: 310 / 1.05 <= 305
    assert table.replay_capacity(0.4) == pytest.approx(305.0)
    assert {c.cell for c in table.feasible(table.replay_capacity(0.4))} == {
        "c000",
        "c001",
        "c002",
        "c003",
    }


def test_a_full_factorial_design_holds_every_combination_once_baseline_first():
    manifest = find("dense-1node")
    factors = dict(
        make_table.parse_factor(manifest, f)
        for f in ("nproc=1,2", "micro_batch=1,2,4", "precision=fp32,bf16")
    )
    assert factors["precision"] == ["fp32", "bf16"] and factors["nproc"] == [1, 2]
    cells = make_table.full_factorial(manifest, factors, [(), ("sdpa_attention",)])
    assert cells[0] == ({}, ())
    resolved = {make_table._key(knobs.resolve(manifest, "bench", o), p) for o, p in cells}
    assert len(resolved) == len(cells) == 2 * 3 * 2 * 2  # distinct, each combination once
    with pytest.raises(KeyError):
        make_table.parse_factor(manifest, "no_such_knob=1,2")


def test_a_drafted_workloads_table_is_designed_at_its_scale_and_replayed_with_its_manifest():
    """A table of a user's drafted script: its manifest (kept beside the tables, the script a
    link to the fixture it was drafted from) is found by the name its rows carry, so the
    replay gives the search the priors a live run of it has; its cells resolve at the scale
    the draft wrote for the user's run (``full``), where the bundled workloads' ``bench`` is
    unknown."""
    kept = [p for p in tables.MANIFESTS.iterdir() if (p / "workload.yaml").is_file()]
    assert len(kept) >= 3  # the accelerate, torchrun and logging scripts
    assert tables.manifest_of("no-such-workload") is None
    for folder in kept:
        manifest = tables.manifest_of(folder.name)
        assert manifest is not None and manifest.name == folder.name
        # its micro-batch and (a script launched one process per rank) its ranks, each at 1 and
        # at the draft's value
        roles = [n for role in ("micro_batch", "ranks") for n in manifest.knobs_with_role(role)[:1]]
        specs = [f"{n}=1,{manifest.knob(n).default}" for n in roles]
        factors = dict(make_table.parse_factor(manifest, f) for f in specs)
        cells = make_table.full_factorial(manifest, factors, [()], "full")
        assert cells[0] == ({}, ()) and len(cells) == 2 ** len(specs)  # the draft's: the baseline
        with pytest.raises(KeyError):
            make_table.full_factorial(manifest, factors, [()], "bench")


def test_the_log_of_other_work_reads_its_windows_and_skips_other_lines(tmp_path):
    log = tmp_path / "busy.log"
    log.write_text("10.5 20.0 pytest -q\nimport sys  # a command's second line\n30 40\n\n")
    assert make_table.read_windows(log) == [(10.5, 20.0), (30.0, 40.0)]


def test_a_new_table_judges_a_commit_and_resumes_only_under_the_same_rules(tmp_path):
    import subprocess

    def git(*args):
        return subprocess.run(
            ["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    rules = tmp_path / "src/infrarsi/run/search.py"
    rules.parent.mkdir(parents=True)
    rules.write_text("STEP = 1\n")
    git("init", "-q")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qam", "x", "--allow-empty")
    git("add", ".")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "rules")
    first = make_table.rules_commit(tmp_path)
    assert first == git("rev-parse", "HEAD")
    rules.write_text("STEP = 2\n")  # the rules changed and not committed: no table judges them
    with pytest.raises(ValueError, match="uncommitted changes to the frozen rules"):
        make_table.rules_commit(tmp_path)
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qam", "new rules")
    table = tmp_path / "t.csv"
    tables.append_row(table, {"cell": "c000", "rules_commit": first}, [])
    with pytest.raises(ValueError, match="measure a new table"):
        make_table.same_rules(table, make_table.rules_commit(tmp_path), tmp_path)
    with pytest.raises(ValueError, match="not one table"):
        make_table.same_rules(table, "pilot", tmp_path)
    make_table.same_rules(table, first, tmp_path)  # the same rules: it resumes


def test_cells_that_are_one_configuration_are_merged_and_anchors_kept_apart(tmp_path):
    """accum_no_sync changes nothing at grad_accum 1 (the manifest says so: ``inert_when``):
    two cells that differ only there are one configuration, their repeats pooled; at
    grad_accum 2 they stay two. The gate's anchors are no cell's repeats."""
    path = tmp_path / "t.csv"
    base = {
        "table": "t",
        "workload": "dense-2node",
        "phase": "grid",
        "patches": "",
        "status": "ok",
        "cost_s": 5.0,
        "mem_cap_bytes": None,
        "repeat": 0,
        "peak_mem_bytes_max": 2e8,
        "k_micro_batch": 4,
    }
    cells = [("c000", 1, False, 0.5), ("c001", 1, True, 0.6), ("c002", 2, False, 0.7)]
    cells += [("c003", 2, True, 0.8)]
    rows = [
        dict(base, cell=c, k_grad_accum=g, k_accum_no_sync=s, step_time_s=t) for c, g, s, t in cells
    ]
    rows.append(dict(base, cell="c000", phase="anchor", step_time_s=0.9))
    for row in rows:
        tables.append_row(path, row, ["micro_batch", "grad_accum", "accum_no_sync"])
    table = tables.load(path)
    assert sorted(table.cells) == ["c000", "c002", "c003"]
    assert table.cells["c000"].step_time_s == [0.5, 0.6]  # one configuration, two draws
    assert len(table.anchors) == 1


def test_a_knob_inert_at_another_knobs_value_resolves_to_its_default():
    from infrarsi.workloads import find, knobs

    manifest = find("dense-2node")
    one = knobs.resolve(manifest, "tiny", {"micro_batch": 4, "accum_no_sync": True})
    assert one["grad_accum"] == 1 and one["accum_no_sync"] is False
    two = knobs.resolve(manifest, "tiny", {"micro_batch": 1, "accum_no_sync": True})
    assert two["grad_accum"] > 1 and two["accum_no_sync"] is True
