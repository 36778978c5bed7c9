"""Doctor: measure the contract's baseline before searching.

Repeated baseline runs (each a recorded trial), one profiled run for the top operators, the
measured hardware peak, MFU, per-phase breakdown per rank, the noise of this machine and what it
means for the verifier, and a ranked diagnosis. The result is one JSON document.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

from infrarsi.contract import Contract, NoisePolicy
from infrarsi.doctor import noise
from infrarsi.doctor.calibrate import calibrate
from infrarsi.doctor.diagnose import Facts, diagnose
from infrarsi.doctor.hardware import probe_hardware
from infrarsi.errors import InfraRSIError
from infrarsi.executors import Executor, LocalExecutor, TrialRequest
from infrarsi.identity import Configuration
from infrarsi.mfu import mfu as compute_mfu
from infrarsi.objective import compared_time, ranked_step_time_s
from infrarsi.options import APPLY_TOP_K, apply_rounds
from infrarsi.records import DOCTOR_BASELINE_LABEL, DoctorReport, DoctorTrial
from infrarsi.trial import TrialRecord, TrialStatus, prepare
from infrarsi.trial.arrivals import Timing
from infrarsi.trial.launch import PROFILE_FILE
from infrarsi.trial.metrics import critical, read_probe_files

TOP_OPS = 10


def _is_operator(name: str) -> bool:
    """Operators (``aten::mm``, ``c10d::allreduce_``), not annotations of Python code."""
    return "::" in name and not name.startswith(("ProfilerStep", "Optimizer."))


class DoctorError(InfraRSIError):
    """The baseline cannot be measured (it does not run, or runs too few steps)."""


def run_doctor(
    contract: Contract,
    repeats: int,
    workdir: Path,
    before_run: Callable[[int], None] | None = None,
    on_trial: Callable[[str, TrialRecord], None] | None = None,
    calibrate_tolerances: bool = True,
    executor: Executor | None = None,
) -> DoctorReport:
    """Measure the baseline ``repeats`` times, one profiled run and the calibration runs (another
    split of the batch, bf16); return the report. Every trial goes through ``executor`` (a
    ``LocalExecutor`` on ``workdir`` by default), keeps its record in its own folder, and is
    told to ``on_trial`` as it ends (``optimize`` puts it into the round's store then: nothing
    measured is lost when a later run fails or the tool stops; there is no side journal).
    """
    manifest = contract.manifest()
    contract.check_locked(manifest.root)
    hardware = probe_hardware()
    spec = prepare(
        manifest,
        contract.scale,
        {},
        mem_cap_bytes=contract.mem_cap_bytes,
        contract_hash=contract.contract_hash,
    )
    progress = _Noted(on_trial, contract.objective)
    trials = _Trials(executor or LocalExecutor(Path(workdir)), contract, workdir, progress)
    runs = []
    for i in range(repeats):
        if before_run is not None:
            before_run(i)
        runs.append(trials.must_run(f"{DOCTOR_BASELINE_LABEL} {i + 1}/{repeats}", spec.knobs))
    profile = _profile(trials, spec.knobs, runs[0]) if _has_probe(manifest) else None
    if calibrate_tolerances:
        equivalence, notes = calibrate(
            manifest,
            contract.scale,
            runs[0],
            workdir,
            run=trials.run,
            repeats=runs[1:],
            last_k=contract.correctness.last_k,
        )
    else:
        equivalence = contract.equivalence
        notes = ["tolerances not calibrated (--no-calibrate): the contract's stay"]
    report, warnings = _remeasured(
        lambda hw: build_report(contract, manifest, spec.knobs, hw, runs, profile), hardware
    )
    return report.model_copy(
        update={
            "equivalence": equivalence,
            "equivalence_notes": notes,
            "warnings": warnings,
            "trials": [DoctorTrial(**t) for t in progress.trials],
        }
    )  # with its cost each


class _Noted:
    """The Doctor's finished trials, in the order they ended (the report's ``trials``), each
    told to ``on_trial`` as it ends."""

    def __init__(self, on_trial: Callable[[str, TrialRecord], None] | None, objective: str):
        self.on_trial = on_trial
        self.trials: list[dict] = []  # DoctorTrial fields
        self.objective = objective

    def __call__(self, label: str, record: TrialRecord) -> None:
        self.trials.append(
            {
                "label": label,
                "trial_id": record.trial_id,
                "status": record.status.value,
                "trial_dir": record.trial_dir,
                "cost_s": record.cost_s,
                "knobs": record.knobs,
                "ranked_time_per_step_s": ranked_step_time_s(record, self.objective),
            }
        )
        if self.on_trial is not None:
            self.on_trial(label, record)


def _has_probe(manifest) -> bool:
    return manifest.launch.metrics == "probe"


class _Trials:
    """The Doctor's trials as requests to its executor, each noted as it ends."""

    def __init__(self, executor: Executor, contract: Contract, workdir: Path, progress):
        self.executor, self.contract, self.progress = executor, contract, progress
        self.workdir = str(Path(workdir).resolve())

    def run(self, label: str, knobs: dict, **options) -> TrialRecord:
        """One trial of the contract's workload under ``knobs``; its record, noted."""
        request = TrialRequest.of(
            self.contract, Configuration.of(knobs), workdir=self.workdir, **options
        )
        record = self.executor.run(request)
        self.progress(label, record)
        return record

    def must_run(self, label: str, knobs: dict, **options) -> TrialRecord:
        """As ``run``; DoctorError unless the trial ended ok."""
        record = self.run(label, knobs, **options)
        if record.status is not TrialStatus.OK:
            raise DoctorError(f"the baseline ended {record.status.value} ({label}): {record.error}")
        return record


def _profile(trials: _Trials, knobs: dict, first: TrialRecord) -> dict:
    """One run with torch.profiler on rank 0 over two steady steps; its operator table. It runs
    without the capacity: the profiler's own buffers are not the workload's memory (a baseline
    that fits its capacity could otherwise run out of memory only because it is profiled)."""
    steps = first.measured.steps
    start = min(max(1, noise.warmup_steps(first.measured.step_times_s)), max(0, steps - 2))
    record = trials.must_run(
        "profiled run", knobs, mem_cap_bytes=None, extra_env={"INFRARSI_PROFILE_STEP": str(start)}
    )
    path = Path(record.trial_dir) / PROFILE_FILE  # the runner has it written there
    return json.loads(path.read_text()) if path.exists() else {"steps": 0, "wall_s": 0, "ops": []}


NOT_MEASURED = "not measured (stdout metrics: the script reports step times and losses only)"


def _remeasured(
    build: Callable[[dict], DoctorReport], hardware: dict
) -> tuple[DoctorReport, list[str]]:
    """The report ``build`` makes on ``hardware``, and its warnings: an MFU above 100% means the
    cached peak was measured on a busy machine, so it is built again on the hardware measured
    again."""
    report = build(hardware)
    if (report.mfu_pct or 0) <= 100:
        return report, []
    return build(probe_hardware(refresh=True)), [
        "the cached hardware peak was below the achieved FLOP/s; the hardware was measured again"
    ]


def build_report(
    contract: Contract,
    manifest,
    knobs: dict,
    hardware: dict,
    runs: list[TrialRecord],
    profile: dict | None,
) -> DoctorReport:
    """Every figure of the doctor's report, from the runs, the profile and the hardware.

    ``profile`` is None for a workload read from stdout: its phases and top operators are
    reported as not measured."""
    per_run = [_steady(r) for r in runs]
    step_time = statistics.median(p["step_time_s"] for p in per_run)
    phases_per_rank = _phases_per_rank(runs, per_run)
    phases, phase_step_s = _critical_phases(runs, per_run)
    tokens_per_s = runs[0].measured.tokens_per_step / step_time
    mfu = compute_mfu(manifest, contract.scale, knobs, hardware, tokens_per_s)
    timing = Timing.of(runs)
    top = top_ops(profile, hardware["facts"]["device_type"]) if profile is not None else []
    peaks = _peak_per_rank(runs)
    facts = _facts(contract, manifest, knobs, hardware, step_time, phases, top, peaks)
    not_measured = {} if phases else {"phases": NOT_MEASURED, "top_ops": NOT_MEASURED}
    return DoctorReport(
        **{
            "contract_hash": contract.contract_hash,
            "workload": manifest.name,
            "scale": contract.scale,
            "knobs": knobs,
            "step_time_s": step_time,
            "tokens_per_s": tokens_per_s,
            "phases": phases,
            "phases_per_rank": phases_per_rank,
            "phase_step_time_s": phase_step_s,
            "unattributed_s": phase_step_s - sum(phases.values()) if phases else None,
            "not_measured": not_measured,
            "compile_time_s": statistics.median(r.measured.compile_time_s for r in runs),
            "e2e_time_s": statistics.median(r.measured.e2e_time_s for r in runs),
            **mfu,
            "peak_flops": hardware["peak_flops"],
            "peak_mem_bytes": peaks,
            "peak_mem_source": runs[0].measured.peak_mem_source,
            "hardware": hardware,
            "noise": _noise(contract, manifest, runs, per_run, timing),
            "timing": timing,
            "runs": [
                {"trial_id": r.trial_id, "warmup_steps_detected": p["warmup"]}
                | {"step_time_s": p["step_time_s"], "cv": p["cv"]}
                for r, p in zip(runs, per_run)
            ],
            "top_ops": top,
            "diagnosis": diagnose(facts),
        }
    )


def _facts(
    contract: Contract,
    manifest,
    knobs: dict,
    hardware: dict,
    step_time: float,
    phases: dict,
    top: list[dict],
    peaks: list[int | None],
) -> Facts:
    """What the diagnosis reads: the workload, the measured step and its phases, the top
    operators' shares, the hardware's peak and cores, the ranks' peaks and the capacity."""
    return Facts(
        manifest,
        knobs,
        step_time,
        phases,
        {o["name"]: o["share"] for o in top},
        hardware["peak_flops"],
        hardware["facts"]["cores"],
        hardware["facts"]["device_type"],
        peaks,
        contract.mem_cap_bytes,
    )


def _peak_per_rank(runs: list[TrialRecord]) -> list[int | None]:
    """Each rank's largest peak over the runs (None where no run measured it)."""
    return [
        max((b for b in col if b is not None), default=None)
        for col in zip(*(r.measured.peak_mem_bytes for r in runs))
    ]


def _noise(
    contract: Contract,
    manifest,
    runs: list[TrialRecord],
    per_run: list[dict],
    timing: Timing | None,
) -> dict:
    """The report's noise: the spread within and between the runs on the objective's time,
    the effect each repeat count can detect, the repeats recommended, the share of the time
    outside the steps and its Amdahl bound, and under throughput the timed steps (``_timed``)."""
    objective = (
        [r.measured.e2e_time_s for r in runs]
        if contract.objective == "e2e_time"
        else [p["step_time_s"] for p in per_run]
    )
    cv_between = noise.cv(objective)
    runs_n = len(runs)
    timed = _timed(contract, manifest, timing, cv_between)
    repeats = noise.recommended_repeats(max(cv_between, timed.get("cv_timed") or 0.0), runs_n)
    outside = noise.outside_share(
        [compared_time(r, contract.objective) or 0.0 for r in runs],
        [r.measured.train_time_s for r in runs],
    )
    return {
        "cv_within": statistics.median(p["cv"] for p in per_run),
        "cv_between": cv_between,
        "objective": contract.objective,
        "runs": runs_n,
        "mde_pct": {
            str(n): 100 * noise.min_detectable_effect(cv_between, n, runs_n) for n in (1, 3, 5)
        },
        "recommended_repeats": repeats,
        "method": noise.METHOD,
        "outside_share": outside,
        "amdahl_bound": noise.amdahl_bound(outside),
        **timed,
        **_timed_note(
            _headroom(
                max(cv_between, timed.get("cv_timed") or 0.0), outside, apply_rounds(repeats)
            ),
            timed,
        ),
    }


def _timed(contract: Contract, manifest, timing: Timing | None, cv_between: float) -> dict:
    """Under a throughput objective: the steps Apply times a patch over by launch to exit
    (``noise.timed_steps``) and the per-round noise that gives (``cv_timed``); nothing for an
    end-to-end objective, a baseline without timed lines, or a launch that cannot be given
    another step count (its noise is then that of the contract's steps)."""
    if contract.objective == "e2e_time" or timing is None:
        return {}
    window = timing.window_s or timing.e2e_s  # what a patch is timed by (``verify.clock``)
    spread = timing.window_sd_s if timing.window_s else timing.e2e_sd_s
    sd = noise.e2e_sd_floor(spread, max(0.0, window - timing.steady_span_s))
    steps = timing.steps
    if manifest.launch.passes_steps():
        steps = noise.timed_steps(timing.steps, timing.step_s, timing.e2e_s, sd)
    return {
        "timed_steps": steps,
        "cv_timed": noise.timed_cv(steps, timing.step_s, sd, cv_between),
    }


def _steady(record: TrialRecord) -> dict:
    times = record.measured.step_times_s
    warmup = noise.warmup_steps(times)
    return {
        "warmup": warmup,
        "step_time_s": statistics.median(times[warmup:]),
        "cv": noise.cv(times[warmup:]),
    }


def _rank_steps(record: TrialRecord) -> list[tuple[dict, ...]]:
    """Each step's entries of every rank, from the probe files of a trial."""
    reports = read_probe_files(list(Path(record.trial_dir).glob("metrics.rank*.jsonl")))
    return list(zip(*(r.steps for r in reports))) if reports else []


def _critical_phases(runs: list[TrialRecord], per_run: list[dict]) -> tuple[dict, float | None]:
    """Mean phases of the slowest rank at each steady step, and the mean of those steps' times:
    the phases add up to that mean, less what ran outside every phase."""
    entries = [
        critical(step)
        for record, steady in zip(runs, per_run)
        for step in _rank_steps(record)[steady["warmup"] :]
    ]
    if not entries:
        return {}, None
    names = sorted({n for e in entries for n in e.get("phases_s", {})})
    phases = {
        n: statistics.fmean(e.get("phases_s", {}).get(n, 0.0) for e in entries) for n in names
    }
    return phases, statistics.fmean(e["step_time_s"] for e in entries)


def _phases_per_rank(runs: list[TrialRecord], per_run: list[dict]) -> list[dict]:
    """Mean seconds per steady step of each phase, per rank, averaged over runs."""
    sums: dict[int, dict[str, list[float]]] = {}
    for record, steady in zip(runs, per_run):
        reports = read_probe_files(list(Path(record.trial_dir).glob("metrics.rank*.jsonl")))
        for report in reports:
            for step in report.steps[steady["warmup"] :]:
                for name, seconds in step["phases_s"].items():
                    sums.setdefault(report.rank, {}).setdefault(name, []).append(seconds)
    names = sorted({n for phases in sums.values() for n in phases})
    return [{n: statistics.fmean(sums[r].get(n, [0.0])) for n in names} for r in sorted(sums)]


def top_ops(profile: dict, device_type: str) -> list[dict]:
    """The operators with the most self time per step, with their share of the step."""
    steps = max(profile.get("steps", 0), 1)
    step_s = profile.get("wall_s", 0) / steps
    key = "self_device_s" if device_type == "cuda" else "self_cpu_s"
    ops = [o for o in profile.get("ops", []) if _is_operator(o["name"])]
    ops.sort(key=lambda o: -o[key])
    return [
        {
            "name": o["name"],
            "self_s_per_step": o[key] / steps,
            "calls_per_step": o["calls"] / steps,
            "share": (o[key] / steps) / step_s if step_s else 0.0,
        }
        for o in ops[:TOP_OPS]
    ]


def noise_policy(report: DoctorReport) -> NoisePolicy:
    """The contract's noise policy as Doctor measured it."""
    n = report.noise.recommended_repeats
    timing = report.timing
    cv = max(report.noise.cv_between, report.noise.cv_timed or 0.0)
    return NoisePolicy(
        repeats=n,
        confidence=1 - noise.ALPHA,
        min_detectable_effect=noise.min_detectable_effect(cv, n, report.noise.runs),
        max_gain=report.noise.amdahl_bound,
        timed_steps=report.noise.timed_steps,
        e2e_sd_s=max(timing.e2e_sd_s, timing.window_sd_s) if timing else None,
        start_sd_s=timing.start_sd_s if timing else None,
        warmup_sd_s=timing.warmup_sd_s if timing else None,
    )


def _timed_note(headroom: dict, timed: dict) -> dict:
    """The headroom sentence, saying over how many steps Apply times a patch (a throughput
    objective: the harness's clock, ``verify.clock``)."""
    if not timed.get("timed_steps"):
        return headroom
    note = (
        f"{headroom['headroom']}; a patch is timed by the harness's clock over "
        f"{timed['timed_steps']} steps ({timed['cv_timed']:.1%} noise a round)"
    )
    return {**headroom, "headroom": note}


def _headroom(cv_between: float, outside: float, rounds: int) -> dict:
    """What the objective can gain at this scale (``noise.gain_note``) and whether that is
    below what Apply's rounds detect (its decision among ``APPLY_TOP_K`` candidates:
    ``noise.apply_detectable_effect``) — then a search can find nothing Apply would confirm,
    and ``run`` and ``optimize`` say so before spending the budget."""
    mde = noise.apply_detectable_effect(cv_between, rounds, APPLY_TOP_K)
    bound = noise.amdahl_bound(outside)
    return {
        "headroom": noise.gain_note(bound, outside, mde, rounds),
        "undetectable": noise.cannot_detect(bound, mde),
    }


def headroom(report: DoctorReport) -> tuple[str, bool]:
    """The report's objective headroom: (the sentence, whether Apply cannot detect it)."""
    return report.noise.headroom, report.noise.undetectable


UNDETECTABLE = (
    "no change to the training steps can gain what Apply detects with this objective at this "
    "scale; the search still runs (ranks, threads and compile change start-up too), but a "
    "throughput objective ('maximise training throughput') or a scale with more steps would "
    "measure what the steps gain"
)


def sealed_contract(contract: Contract, report: DoctorReport) -> tuple[Contract, DoctorReport]:
    """The contract re-sealed with the noise policy and the tolerances the Doctor measured,
    and the report that says so: the one way a Doctor's findings enter a contract."""
    sealed = contract.model_copy(
        update={"noise": noise_policy(report), "equivalence": report.equivalence}
    ).sealed()
    return sealed, report.model_copy(update={"contract_hash_after": sealed.contract_hash})
