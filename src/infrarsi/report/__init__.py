"""Stage 4, Report: ``report.md`` and a self-contained ``report.html`` of a run directory.

Summary first (speed-up with its interval, MFU and peak memory before -> after, what changed
and why), then the figures, then every trial — failures included — with its cost. It reads the
store, ``apply.json``, ``doctor.json`` and the trial records; it runs nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from infrarsi.callbacks import Callback, RoundEnd
from infrarsi.contract import Contract
from infrarsi.errors import InfraRSIError
from infrarsi.identity import changed_knobs
from infrarsi.mfu import mfu
from infrarsi.proposal import ProposalLine, read_lines
from infrarsi.records import (
    BANK_ADVICE_FILE,
    DOCTOR_BASELINE_LABEL,
    DOCTOR_FILE,
    ApplyResult,
    BankAdvice,
    DoctorReport,
    Finding,
    Report,
    ReportSummary,
    seed_held,
)
from infrarsi.records.trial import TrialStatus
from infrarsi.report import figures
from infrarsi.report.render import html_report, markdown_report
from infrarsi.stages import Stage
from infrarsi.store import Ledger, RunDirError, StoredRun, StoredTrial
from infrarsi.trial import TrialRecord
from infrarsi.workloads import knobs as knob_rules
from infrarsi.workloads.manifest import Manifest

FIGURE_DIR = "report-figures"


class ReportError(InfraRSIError):
    """A run directory the report cannot be written for, with the fix."""


@dataclass
class ReportData:
    """Everything the report shows, gathered from the run directory."""

    run_dir: Path
    run: StoredRun
    contract: Contract
    manifest: Manifest
    trials: list[StoredTrial]  # the search's, as the round's ledger holds them
    apply: ApplyResult | None
    doctor: DoctorReport | None
    baseline_record: TrialRecord | None
    winner_record: TrialRecord | None
    summary: dict = field(default_factory=dict)
    figures: dict[str, bytes] = field(default_factory=dict)
    bank: BankAdvice | None = None
    bank_seeds: list[dict] = field(default_factory=list)
    proposals: list[ProposalLine] = field(default_factory=list)
    doctor_trials: list[StoredTrial] = field(default_factory=list)  # the ledger's


def gather(run_dir: Path, ledger: Ledger | None = None) -> ReportData:
    """Read the run (through ``ledger``, the round's handle; None: the one ``run_dir``
    names), Apply's result, the Doctor's report and the records the report needs."""
    run_dir = Path(run_dir).resolve()
    try:
        ledger = ledger or Ledger.of_run_dir(run_dir)
    except RunDirError as exc:
        raise ReportError(str(exc)) from None
    store, run = ledger.store, ledger.run
    contract = run.contract
    manifest = contract.manifest()
    trials = store.trials(run.run_id)
    applied = ApplyResult.load(run_dir) if (run_dir / "apply.json").exists() else None
    doctor_path = run_dir / DOCTOR_FILE
    doctor = DoctorReport.load(doctor_path) if doctor_path.exists() else None
    records = _records(applied, store.trials(run.run_id, Stage.APPLY))
    data = ReportData(run_dir, run, contract, manifest, trials, applied, doctor, *records)
    data.summary = summarise(data)
    data.doctor_trials = store.trials(run.run_id, Stage.DOCTOR)
    if (run_dir / BANK_ADVICE_FILE).exists():
        data.bank = BankAdvice.load(run_dir / BANK_ADVICE_FILE)
        data.bank_seeds = bank_seed_rows(data)
    data.proposals = read_lines(run_dir)
    return data


def bank_seed_rows(data: ReportData) -> list[dict]:
    """Each seed the bank gave the run: where it came from, what it expected, what its search
    trials measured here against the baseline (the Doctor's baseline runs, else the search's
    baseline trials), and whether it held."""
    objective = data.contract.objective
    base = [
        time_s
        for t in data.doctor_trials
        if (t.label or "").startswith(DOCTOR_BASELINE_LABEL)
        and t.status.is_ok()
        and (time_s := t.ranked_time_per_step_s(objective))
    ]
    if not base and data.trials:
        first = data.trials[0].configuration
        base = [
            time_s
            for t in data.trials
            if t.status.is_ok()
            and t.configuration == first
            and (time_s := t.ranked_time_per_step_s(objective)) is not None
        ]
    base_s = _median(base)
    rows = []
    for seed in data.bank.seeds if data.bank else []:
        key = seed.configuration.key
        times = [
            t.ranked_time_per_step_s(objective)
            for t in data.trials
            if t.status.is_ok() and t.configuration.key == key
        ]
        measured = base_s / _median(times) if times and base_s else None
        rows.append(
            {
                "knobs": seed.knobs,
                "patches": seed.patches,
                "as_measured": seed.as_measured,
                "expected_speedup": seed.expected_speedup,
                "similarity": seed.similarity,
                "sources": seed.sources,
                "trials": len(times),
                "measured_speedup": measured,
                "held": seed_held(measured),
            }
        )
    return rows


def _records(
    applied: ApplyResult | None, stored: list[StoredTrial]
) -> tuple[TrialRecord | None, TrialRecord | None]:
    """The first ok baseline and winner records of Apply's rounds, as the run's store holds
    them (``stored``: Apply's trials)."""
    if applied is None:
        return None, None
    by_id = {t.trial_id: t.record for t in stored if t.record is not None}
    found: dict[str, TrialRecord] = {}
    for m in applied.measurements:
        record = by_id.get(m.trial_id)
        if (
            record is not None
            and m.status == TrialStatus.OK
            and m.label in ("baseline", applied.promoted)
            and m.label not in found
        ):
            found[m.label] = record
    return found.get("baseline"), found.get(applied.promoted) if applied.promoted else None


def summarise(data: ReportData) -> dict:
    """The headline figures: speed-up and interval, MFU and peak before -> after, changes."""
    a, baseline_knobs = data.apply, knob_rules.baseline(data.manifest, data.contract.scale)
    out = {
        "workload": data.manifest.name,
        "scale": data.contract.scale,
        "run_id": data.run.run_id,
        "searcher": data.run.searcher,
        "trials": len(data.trials),
        "oom_trials": sum(t.status == TrialStatus.OOM for t in data.trials),
        "slow_trials": sum(t.status == TrialStatus.SLOW for t in data.trials),
        "search_cost_s": sum(t.cost_s or 0 for t in data.trials),
        "capacity_bytes": data.contract.mem_cap_bytes,
        "applied": a is not None,
        "headroom": data.doctor.noise.headroom or None if data.doctor is not None else None,
        "compared": a.compared if a else None,
        "promoted": bool(a and a.promoted),
        "decision": a.decision if a else "not re-verified: run `infrarsi apply RUN_DIR`",
    }
    winner = a.winner if a else None
    base_tps = a.baseline.get("tokens_per_s") if a else None
    out["baseline"] = {
        "knobs": baseline_knobs,
        "step_time_s": a.baseline.get("step_time_s") if a else None,
        "tokens_per_s": base_tps,
        "peak_mem_bytes": a.baseline.get("peak_mem_bytes") if a else None,
        "mfu_pct": _mfu_pct(data, baseline_knobs, base_tps),
    }
    if a is not None and winner is not None:
        mine = [m for m in a.measurements if m.label == winner.label and m.status.is_ok()]
        tps = _median([m.tokens_per_s for m in mine])
        out["winner"] = {
            "knobs": winner.knobs,
            "patches": winner.patches,
            "speedup": winner.speedup,
            "ci_low": winner.ci_low,
            "ci_high": winner.ci_high,
            "rounds": len(winner.ratios),
            "step_time_s": _median([m.step_time_s for m in mine]),
            "tokens_per_s": tps,
            "peak_mem_bytes": _median([m.peak_mem_bytes for m in mine]),
            "mfu_pct": _mfu_pct(data, winner.knobs, tps),
            "changes": changes(data, baseline_knobs, winner.knobs, winner.patches),
        }
    return out


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _mfu_pct(data: ReportData, knobs: dict, tokens_per_s: float | None) -> float | None:
    if tokens_per_s is None or data.doctor is None:
        return None
    return mfu(data.manifest, data.contract.scale, knobs, data.doctor.hardware, tokens_per_s)[
        "mfu_pct"
    ]


def changes(data: ReportData, base: dict, knobs: dict, patches: list[str]) -> list[str]:
    """What the winner changes, each with why: the patch's title, the Doctor's finding."""
    findings = data.doctor.diagnosis if data.doctor is not None else []
    out = []
    for name, value in changed_knobs(knobs, base).items():
        out.append(f"knob {name}: {base.get(name)} -> {value}" + _why(findings, name))
    for pid in patches:
        title = next((p.title for p in data.manifest.patches if p.id == pid), "a user's diff")
        out.append(f"patch {pid}: {title}" + _why(findings, pid))
    return out


def _why(findings: list[Finding], name: str) -> str:
    hits = [f.finding for f in findings if name in f.suggests]
    return f" (the Doctor found: {hits[0]})" if hits else ""


def draw(data: ReportData) -> dict[str, bytes]:
    """Every figure the data allows, by file name."""
    cap = data.contract.mem_cap_bytes
    out = {
        "best_so_far.png": figures.best_so_far(data.trials, data.contract.objective),
        "time_vs_memory.png": figures.time_vs_memory(data.trials, data.contract.objective, cap),
        "memory_calibration.png": figures.memory_calibration(data.trials, cap),
    }
    b, w = data.baseline_record, data.winner_record
    if b is not None and w is not None and b.metrics and w.metrics:
        if b.metrics.phases_s or w.metrics.phases_s:
            out["phases.png"] = figures.phases(b.metrics.phases_s, w.metrics.phases_s)
        out["loss.png"] = figures.loss_curves(b.metrics.loss, w.metrics.loss)
    return out


def write_report(run_dir: Path, ledger: Ledger | None = None) -> Report:
    """Write ``report.md`` (figures in ``report-figures/``) and ``report.html`` (figures
    embedded) of the run in ``run_dir`` (read through ``ledger`` where the composer gives
    one); returns the record of what was written, with the headline."""
    data = gather(run_dir, ledger)
    data.figures = draw(data)
    folder = data.run_dir / FIGURE_DIR
    folder.mkdir(exist_ok=True)
    written = []
    for name, png in data.figures.items():
        (folder / name).write_bytes(png)
        written.append(str(folder / name))
    md = data.run_dir / "report.md"
    md.write_text(markdown_report(data, FIGURE_DIR))
    html = data.run_dir / "report.html"
    html.write_text(html_report(data))
    return Report(
        markdown=str(md),
        html=str(html),
        figures=written,
        summary=ReportSummary(**data.summary),
    )


class ReportWriter(Callback):
    """The report as a round's callback: written from the round's store when the round ends
    (``written``: what it wrote, None before then)."""

    def __init__(self) -> None:
        self.written: Report | None = None

    def on_round_end(self, end: RoundEnd) -> None:
        self.written = write_report(end.run_dir, end.ledger)
