"""What a run directory adds to the bank: one experience per trial of the Doctor, the search and
Apply, each normalised to the baseline measured in the same run on the same host.

- **Doctor**: its baseline runs (speed-up ~1, with the baseline's peak) and calibration runs
  (bf16, another split: what this host does with those knob values), against the median of the
  baseline runs' ranked time per step.
- **Run**: every trial of the search against the same median; an OOM is kept censored (its
  peak at least the capacity), a trial cut short as slow is kept censored (its speed-up at
  most baseline / the time it was cut at).
- **Apply**: each candidate's interleaved verdict (the geometric mean of its per-round ratios
  to the baseline measured beside it) — the best-measured speed-up the bank holds; a candidate
  that failed verification is kept as ``invalid``.

Patch texts are stored once by the SHA-256 of their content; an experience names its patches
by id and hash. Ingesting a run twice stores it once (each experience has a key).
"""

from __future__ import annotations

import hashlib
import math
import statistics
import time
from pathlib import Path

from infrarsi.bank.signatures import (
    hardware_signature,
    launchers_per_host,
    signature_fp,
    workload_signature,
)
from infrarsi.host import fingerprint, machine_facts
from infrarsi.objective import ranked_step_time_s
from infrarsi.proposal import is_proposed
from infrarsi.records import DOCTOR_BASELINE_LABEL, DOCTOR_FILE, ApplyResult, DoctorReport
from infrarsi.records.trial import TrialStatus
from infrarsi.stages import Stage
from infrarsi.store import Ledger
from infrarsi.store.bank import Experience

# the Doctor's trials the bank learns from: its baseline runs and its calibration runs
DOCTOR_LABELS = (DOCTOR_BASELINE_LABEL, "calibration")


class RunContext:
    """What every experience of one run shares: ids, signatures, the baseline's figures."""

    def __init__(self, run_dir: Path, ledger: Ledger | None = None):
        self.run_dir = Path(run_dir)
        ledger = ledger or Ledger.of_run_dir(run_dir)
        self.store, self.run = ledger.store, ledger.run
        self.contract = self.run.contract
        self.manifest = self.contract.manifest()
        doctor_path = Path(run_dir) / DOCTOR_FILE
        self.doctor = DoctorReport.load(doctor_path) if doctor_path.exists() else None
        self.trials = [t for t in self.store.trials(self.run.run_id) if t.status.is_finished()]
        base_knobs = self.doctor.knobs if self.doctor else self._first_knobs()
        self.baseline_time_s, self.baseline_peak_bytes = self._baseline()
        hardware = self.doctor.hardware if self.doctor else _facts_only()
        ranks = next((base_knobs.get(k) for k in self.manifest.knobs_with_role("ranks")), None)
        self.hardware = hardware_signature(
            hardware,
            self.contract.mem_cap_bytes,
            ranks,
            self.manifest.launch.nodes,
            self._nodes_per_host(),
        )
        self.workload = workload_signature(
            self.manifest,
            self.contract.scale,
            base_knobs,
            self.doctor.flops_per_token if self.doctor else None,
        )
        self.hardware_fp = self.hardware.get("fingerprint") or signature_fp(self.hardware)
        self.workload_fp = signature_fp(self.workload)

    def _nodes_per_host(self) -> int:
        """How many of the workload's nodes shared one host in this run's trials (their
        records' launcher nodes; all of them where no record says)."""
        nodes = self.manifest.launch.nodes
        spread = [
            t.record.launcher_nodes for t in self.trials if t.record and t.record.launcher_nodes
        ]
        return launchers_per_host(nodes, spread[0]) if spread else nodes

    def _first_knobs(self) -> dict:
        return self.trials[0].config_json["knobs"] if self.trials else {}

    def _baseline(self) -> tuple[float | None, float | None]:
        """The baseline's ranked time per step and peak: the Doctor's baseline runs' medians,
        else the search's trials of the baseline config."""
        times, peaks = [], []
        if self.doctor:
            times = [
                t.ranked_time_per_step_s
                for t in self.doctor.trials
                if t.label.startswith(DOCTOR_BASELINE_LABEL) and t.ranked_time_per_step_s
            ]
            peaks = [p for p in self.doctor.peak_mem_bytes if p]
        if not times and self.trials:
            first = self.trials[0].configuration
            for t in self.trials:
                if t.configuration == first and t.status.is_ok() and t.record:
                    record = t.record
                    ranked = ranked_step_time_s(record, self.contract.objective)
                    times += [ranked] if ranked is not None else []
                    if record.metrics and record.metrics.max_peak_mem_bytes:
                        peaks.append(record.metrics.max_peak_mem_bytes)
        times = [t for t in times if t]
        return (statistics.median(times) if times else None, max(peaks) if peaks else None)

    def experience(
        self,
        key: str,
        stage: Stage,
        knobs: dict,
        patches: list[str],
        status: TrialStatus,
        **figures,
    ) -> Experience:
        """One experience of this run."""
        return Experience(
            key=f"{self.run.run_id}/{stage}/{key}",
            created_unix_s=time.time(),
            run_id=self.run.run_id,
            contract_hash=self.run.contract_hash,
            stage=stage,
            workload=self.manifest.name,
            scale=self.contract.scale,
            hardware_fp=self.hardware_fp,
            hardware_json=self.hardware,
            workload_fp=self.workload_fp,
            workload_json=self.workload,
            knobs_json=knobs,
            patches_json=[{"id": p, "sha256": self.patch_sha(p)} for p in sorted(patches)],
            status=status,
            baseline_ranked_time_per_step_s=self.baseline_time_s,
            baseline_peak_mem_bytes=self.baseline_peak_bytes,
            capacity_bytes=self.contract.mem_cap_bytes,
            **figures,
        )

    def patch_text(self, patch_id: str) -> str | None:
        """A patch's text: a catalog patch's, or one proposed during the run (its diff in the
        run directory); None for a patch neither holds."""
        try:
            if is_proposed(patch_id):
                return (self.run_dir / patch_id).read_text()
            return self.manifest.patch_path(patch_id).read_text()
        except (KeyError, OSError, ValueError):
            return None

    def patch_sha(self, patch_id: str) -> str | None:
        text = self.patch_text(patch_id)
        return hashlib.sha256(text.encode()).hexdigest() if text is not None else None


def _facts_only() -> dict:
    """This host's facts and fingerprint when no Doctor measured its peaks."""
    facts = machine_facts()
    return {"facts": facts, "fingerprint": fingerprint(facts)}


def experiences_of_run(
    run_dir: Path, ledger: Ledger | None = None
) -> tuple[list[Experience], dict[str, tuple[str, str]], RunContext]:
    """Every experience a run directory holds (read through ``ledger`` where given), the
    texts of its patches, and its context."""
    ctx = RunContext(Path(run_dir), ledger)
    out = _doctor(ctx) + _search(ctx) + _apply(ctx, Path(run_dir))
    texts = {}
    for e in out:
        for p in e.patches_json:
            text = ctx.patch_text(p["id"])
            if p["sha256"] and text is not None:
                texts[p["sha256"]] = (p["id"], text)
    return out, texts, ctx


def _speedup(ctx: RunContext, time_s: float | None) -> float | None:
    if not time_s or not ctx.baseline_time_s:
        return None
    return ctx.baseline_time_s / time_s


def _share(ctx: RunContext, peak: float | None) -> float | None:
    cap = ctx.contract.mem_cap_bytes
    return peak / cap if peak and cap else None


def _doctor(ctx: RunContext) -> list[Experience]:
    """The Doctor's baseline and calibration runs, as the round's ledger holds them."""
    out = []
    for t in ctx.store.trials(ctx.run.run_id, Stage.DOCTOR):
        label, record = t.label or "", t.record
        if record is None or not record.knobs or not label.startswith(DOCTOR_LABELS):
            continue
        time_s = ranked_step_time_s(record, ctx.contract.objective)
        peak = ctx.baseline_peak_bytes if label.startswith(DOCTOR_BASELINE_LABEL) else None
        out.append(
            ctx.experience(
                record.trial_id,
                Stage.DOCTOR,
                record.knobs,
                [],
                t.status,
                speedup=_speedup(ctx, time_s),
                ranked_time_per_step_s=time_s,
                peak_mem_bytes=peak,
                peak_share=_share(ctx, peak),
                cost_s=record.cost_s,
            )
        )
    return out


def _search(ctx: RunContext) -> list[Experience]:
    out = []
    for t in ctx.trials:
        record = t.record
        status = t.status
        peak = t.peak_mem_bytes
        time_s, censored = None, False
        if status.is_ok() and record is not None:
            time_s = ranked_step_time_s(record, ctx.contract.objective)
        elif status is TrialStatus.SLOW and record is not None and record.censored_time_per_step_s:
            time_s, censored = record.censored_time_per_step_s, True
        elif status is TrialStatus.OOM:
            censored = True
            peak = peak or (record.mem_cap_bytes if record else None)
        out.append(
            ctx.experience(
                t.trial_id or f"row{t.id}",
                Stage.RUN,
                t.config_json["knobs"],
                t.config_json["patches"],
                status,
                speedup=_speedup(ctx, time_s),
                censored=censored,
                ranked_time_per_step_s=time_s,
                peak_mem_bytes=peak,
                peak_share=_share(ctx, peak),
                cost_s=t.cost_s,
            )
        )
    return out


def _apply(ctx: RunContext, run_dir: Path) -> list[Experience]:
    try:
        applied = ApplyResult.load(run_dir)
    except FileNotFoundError:
        return []
    out = []
    for c in applied.candidates:
        if c.speedup is None or not math.isfinite(c.speedup):
            continue
        peaks = [
            m.peak_mem_bytes
            for m in applied.measurements
            if m.label == c.label and m.peak_mem_bytes
        ]
        peak = statistics.median(peaks) if peaks else None
        out.append(
            ctx.experience(
                c.label,
                Stage.APPLY,
                c.knobs,
                c.patches,
                TrialStatus.OK if c.verified else TrialStatus.INVALID,
                speedup=c.speedup,
                peak_mem_bytes=peak,
                peak_share=_share(ctx, peak),
            )
        )
    return out
