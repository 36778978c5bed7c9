"""Stage 4, Apply: re-run the run's best candidates interleaved with the baseline, promote only
what holds, and write the winner — ``winner.patch``, ``launch.sh``, the contract, ``audit.jsonl``
and the verification table — into the run directory.

It reads the run through the store (the run's ranking, written when the run ended; the fastest
measured configs otherwise), never through the Run stage's code.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from infrarsi.apply import decide, outputs
from infrarsi.apply.ledger import ApplyLedger
from infrarsi.apply.rounds import BASELINE, Rounds
from infrarsi.contract import Contract
from infrarsi.errors import InfraRSIError
from infrarsi.events import ApplyPlanned, EventSink, ignore
from infrarsi.executors import Executor, LocalExecutor
from infrarsi.folder_lock import holding
from infrarsi.identity import ConfigKey, Configuration
from infrarsi.objective import compared_name
from infrarsi.options import APPLY_TOP_K
from infrarsi.records import (
    AUDIT_FILE,
    DOCTOR_FILE,
    ApplyResult,
    CandidateResult,
    DoctorReport,
    Measurement,
    RankedConfig,
    ReferenceRun,
)
from infrarsi.records.trial import TrialStatus
from infrarsi.stages import Stage
from infrarsi.store import Ledger, RunDirError, Store, StoredRun, StoredTrial
from infrarsi.verify import evidence_strength
from infrarsi.workloads import knobs as knob_rules
from infrarsi.workloads.manifest import Manifest


class ApplyError(InfraRSIError):
    """A run directory Apply cannot work on, with the reason and the fix."""


def open_run(
    run_dir: Path, ledger: Ledger | None = None
) -> tuple[Store, StoredRun, list[StoredTrial], Contract]:
    """The store, run, trials and contract of a run directory, read through ``ledger`` (the
    round's handle its composer opened and subscribed its listeners to — the audit among
    them), or, without one, from the store ``run_dir`` names, heard by no one. The Doctor's
    trials are in the store (a run made before they were stored has them added from its
    ``doctor.json``)."""
    if ledger is None:
        try:
            ledger = Ledger.of_run_dir(run_dir)
        except RunDirError as exc:
            raise ApplyError(str(exc)) from None
    _store_every_stage(ledger.store, ledger.run_id, Path(run_dir))
    run = ledger.run
    return ledger.store, run, ledger.store.trials(run.run_id), run.contract


def candidates_of(
    run: StoredRun, trials: list[StoredTrial], baseline: dict[str, Any], top_k: int
) -> list[CandidateResult]:
    """The top ``top_k`` configs of the run other than the baseline itself: the run's ranking,
    or (a run stopped before it wrote one) its fastest measured configs."""
    ranking = run.ranking
    if not ranking:
        times: dict[ConfigKey, list[Any]] = {}
        configs: dict[ConfigKey, dict[str, Any]] = {}
        for t in trials:
            if t.status.is_ok():
                key = t.configuration.key
                configs.setdefault(key, t.config_json)
                times.setdefault(key, []).append(t.step_time_s)
        ranking = [
            RankedConfig(**configs[k], trials=len(v), step_time_s=statistics.median(v))
            for k, v in sorted(times.items(), key=lambda kv: statistics.median(kv[1]))
        ]
    out: list[CandidateResult] = []
    for entry in ranking:
        if entry.configuration == Configuration.of(baseline):
            continue  # the baseline is measured every round anyway
        out.append(
            CandidateResult(
                label=f"c{len(out) + 1}",
                knobs=entry.knobs,
                patches=list(entry.patches),
                search_step_time_s=entry.step_time_s,
            )
        )
        if len(out) == top_k:
            break
    return out


def judge(
    candidates: list[CandidateResult],
    measurements: list[Measurement],
    rounds: int,
    confidence: float,
    seed: int = 0,
) -> tuple[list[CandidateResult], str | None, str]:
    """Each candidate's ratios, interval and checks from the measurements; which one is
    promoted and why. Pure: what the search measured of a candidate plays no part."""
    base: list[float | None] = [None] * (rounds + 1)
    for m in measurements:
        if m.label == BASELINE and m.round <= rounds:
            base[m.round] = m.compared_s
    judged, choices = [], []
    for c in candidates:
        mine = [m for m in measurements if m.label == c.label]
        times: list[float | None] = [None] * rounds
        for m in mine:
            if m.round < rounds:
                times[m.round] = m.compared_s if m.valid else None
        ratios = decide.round_ratios(base, times)
        ivl = decide.interval(ratios, confidence, comparisons=len(candidates), seed=seed)
        verified = bool(mine) and all(m.valid for m in mine)
        reasons = sorted({r for m in mine for r in m.reasons})
        judged.append(
            c.model_copy(
                update=dict(
                    ratios=ratios,
                    speedup=ivl.speedup,
                    ci_low=ivl.low,
                    ci_high=ivl.high,
                    verified=verified,
                    reasons=reasons,
                )
            )
        )
        choices.append(decide.Choice(c.label, ivl, verified))
    promoted, decision = decide.promote(choices)
    judged = [c.model_copy(update={"promoted": c.label == promoted}) for c in judged]
    return judged, promoted, decision


def apply_run(
    run_dir: Path,
    top_k: int = APPLY_TOP_K,
    executor: Executor | None = None,
    rounds: int | None = None,
    seed: int = 0,
    on_event: EventSink | None = None,
    ledger: Ledger | None = None,
) -> ApplyResult:
    """Re-measure the top ``top_k`` against the baseline, decide, write what holds (apply.json);
    each measurement goes into the round's ``ledger`` as it ends, heard by whoever its
    composer subscribed (the audit: ``AuditLog.following``); without one, into the store
    ``run_dir`` names, heard by no one. Refused while another process runs in ``run_dir``."""
    with holding(Path(run_dir), create=False):
        return _apply_run(run_dir, top_k, executor, rounds, seed, on_event, ledger)


def _apply_run(
    run_dir: Path,
    top_k: int,
    executor: Executor | None,
    rounds: int | None,
    seed: int,
    on_event: EventSink | None,
    ledger: Ledger | None,
) -> ApplyResult:
    run_dir = Path(run_dir).resolve()
    store, run, trials, contract = open_run(run_dir, ledger)
    manifest = contract.manifest()
    contract.check_locked(manifest.root)
    baseline_knobs = knob_rules.baseline(manifest, contract.scale)
    candidates = candidates_of(run, trials, baseline_knobs, top_k)
    n_rounds = rounds or decide.rounds_needed(contract.noise.repeats)
    (on_event or ignore)(
        ApplyPlanned(candidates=candidates, rounds=n_rounds, baseline_knobs=baseline_knobs)
    )
    measurements: list[Measurement] = []
    references: list[ReferenceRun] = []
    if candidates:  # one host for the whole comparison: times are compared on one clock
        with (executor or LocalExecutor(run_dir)).pinned(manifest) as one_host:
            kept = ApplyLedger(store, run.run_id)
            rounds_run = Rounds(contract, kept, one_host, candidates, baseline_knobs, on_event)
            measurements = rounds_run.run(n_rounds, contract.noise.confidence)
            references = list(rounds_run.references.runs.values())
    judged, promoted, decision = judge(
        candidates, measurements, n_rounds, contract.noise.confidence, seed
    )
    result = ApplyResult(
        run_dir=str(run_dir),
        run_id=run.run_id,
        contract_hash=contract.contract_hash,
        workload=manifest.name,
        scale=contract.scale,
        compared=compared_name(contract.objective),
        rounds=n_rounds,
        evidence=_evidence(contract, measurements),
        confidence=contract.noise.confidence,
        method=decide.METHOD,
        baseline=_baseline_summary(baseline_knobs, measurements),
        candidates=judged,
        measurements=measurements,
        references=references,
        promoted=promoted,
        decision=decision,
    )
    files = _write(result, contract, manifest, run_dir)
    result = result.model_copy(update={"files": files})
    result.save(run_dir)
    return result


def _doctor_folders(run_dir: Path) -> list[tuple[str, str | None]]:
    """The Doctor's trials of this run as (folder, label), as its ``doctor.json`` lists them."""
    path = Path(run_dir) / DOCTOR_FILE
    try:
        return DoctorReport.load(path).trial_folders() if path.is_file() else []
    except ValueError:  # a report this version cannot read: the audit says what it can
        return []


def _store_every_stage(store: Store, run_id: str, run_dir: Path) -> None:
    """The Doctor's trials in the run's store, where a run made before they were stored lacks
    them: each trial once (Apply's own went in as each ended)."""
    store.add_finished(run_id, Stage.DOCTOR, _doctor_folders(run_dir))


def _evidence(contract: Contract, measurements: list[Measurement]) -> str:
    """How strong the evidence of the candidates' verdicts was (what could not be checked)."""
    judged = [m for m in measurements if m.valid is not None]
    missing = sorted({n for m in judged for n in m.not_checked})
    return evidence_strength(contract, missing) if judged else ""


def _baseline_summary(knobs: dict[str, Any], measurements: list[Measurement]) -> dict[str, Any]:
    ok = [m for m in measurements if m.label == BASELINE and m.status == TrialStatus.OK]

    def median(field: str) -> float | None:
        values = [getattr(m, field) for m in ok if getattr(m, field) is not None]
        return statistics.median(values) if values else None

    return {
        "knobs": knobs,
        "compared_s": median("compared_s"),
        "step_time_s": median("step_time_s"),
        "e2e_time_s": median("e2e_time_s"),
        "tokens_per_s": median("tokens_per_s"),
        "peak_mem_bytes": median("peak_mem_bytes"),
        "runs": len(ok),
    }


def _write(
    result: ApplyResult, contract: Contract, manifest: Manifest, run_dir: Path
) -> dict[str, Any]:
    """What Apply writes besides ``apply.json``: the contract, the verification table, the
    winner's patch and launch script (the audit was written line by line as trials ended)."""
    files: dict[str, Any] = {}
    contract.save(run_dir / "contract.yaml")
    files["contract"] = "contract.yaml"
    files["audit"] = AUDIT_FILE
    (run_dir / "verification.md").write_text(
        f"# Verification of run {result.run_id}\n\n{result.decision}\n\nCompared: "
        f"{result.compared}, {result.rounds} interleaved rounds, confidence "
        f"{result.confidence:.0%}.\n\nEvidence: {result.evidence}.\n\n"
        + outputs.verification_table(result)
        + "\nCompared with, besides the baselines:\n\n"
        + outputs.comparisons(result)
    )
    files["verification"] = "verification.md"
    written = outputs.write_winner(result, manifest, contract, run_dir)
    files.update(dict(zip(("patch", "launch"), written)))
    return files
