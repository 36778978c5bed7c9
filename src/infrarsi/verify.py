"""Is a candidate's gain trustworthy? Every check of the contract, with every reason it fails.

The Run and Apply stages call ``verify(contract, baseline, candidate)``. A candidate is valid
only when it computed the same workload (tokens per step, steps), its loss stays within the
contract's tolerance of the baseline's, its peak memory stays under the capacity on every rank,
the locked files are byte-identical, its patches touch only editable files, and the step times
it reports agree with the time the harness saw pass from outside its processes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from infrarsi.contract import Contract
from infrarsi.trial.patching import matches
from infrarsi.trial.record import TrialRecord, TrialStatus

# Reported training time may fall short of the span seen from outside by the loop's own
# overhead between steps (prints, loss.item()) and the watcher's polling: allow this much.
TIMING_SLACK_FRACTION = 0.25
TIMING_SLACK_S = 0.1


@dataclass
class Verdict:
    """``valid`` or not, with every reason (empty when valid)."""
    valid: bool
    reasons: list[str] = field(default_factory=list)


def verify(contract: Contract, baseline: TrialRecord, candidate: TrialRecord) -> Verdict:
    """Judge ``candidate`` against ``baseline`` under ``contract``."""
    if candidate.status is not TrialStatus.OK:
        return Verdict(False, [f"the trial ended {candidate.status.value}: {candidate.error}"])
    if baseline.status is not TrialStatus.OK:
        return Verdict(False, [f"the baseline ended {baseline.status.value}"])
    reasons = []
    for check in (_workload, _loss, _memory, _locked, _patch_paths, _timing, _contract_hash):
        reasons += check(contract, baseline, candidate)
    return Verdict(not reasons, reasons)


def _workload(contract: Contract, baseline: TrialRecord, cand: TrialRecord) -> list[str]:
    out, m, inv = [], cand.metrics, contract.invariants
    if m.tokens_per_step != inv.tokens_per_step:
        out.append(f"tokens per step differ: {m.tokens_per_step} vs {inv.tokens_per_step}")
    if m.steps != inv.steps:
        out.append(f"steps differ: {m.steps} vs {inv.steps}")
    return out


def _loss(contract: Contract, baseline: TrialRecord, cand: TrialRecord) -> list[str]:
    tol, ref, got = contract.correctness.loss_tolerance, baseline.metrics.loss, cand.metrics.loss
    if len(ref) != len(got):
        return [f"loss trajectory has {len(got)} steps, the baseline's {len(ref)}"]
    k = contract.correctness.last_k
    final = abs(statistics.fmean(got[-k:]) / statistics.fmean(ref[-k:]) - 1)
    out = []
    if final > tol:
        out.append(f"loss drift: mean of the last {k} steps differs by {final:.2%} "
                   f"(tolerance {tol:.2%})")
    if contract.correctness.pointwise:
        worst, step = max((abs(g / r - 1), i) for i, (g, r) in enumerate(zip(got, ref)))
        if worst > tol:
            out.append(f"loss drift: step {step} differs by {worst:.2%} (tolerance {tol:.2%})")
    return out


def _memory(contract: Contract, baseline: TrialRecord, cand: TrialRecord) -> list[str]:
    cap = contract.mem_cap_bytes
    if cap is None:
        return []
    peaks = cand.metrics.peak_mem_bytes
    over = [f"rank {r}: {b} bytes" for r, b in enumerate(peaks) if b is not None and b > cap]
    unknown = [r for r, b in enumerate(peaks) if b is None]
    out = [f"peak memory over the capacity of {cap} bytes on {', '.join(over)}"] if over else []
    if unknown:
        out.append(f"peak memory of rank(s) {unknown} was not measured: the capacity of {cap} "
                   "bytes cannot be checked")
    return out


def _locked(contract: Contract, baseline: TrialRecord, cand: TrialRecord) -> list[str]:
    changed = sorted(p for p, digest in contract.locked.items()
                     if p in cand.locked_files and cand.locked_files[p] != digest)
    return [f"locked files changed: {', '.join(changed)}"] if changed else []


def _patch_paths(contract: Contract, baseline: TrialRecord, cand: TrialRecord) -> list[str]:
    out = []
    for patch in cand.patches:
        bad = [p for p in patch.paths if p in contract.locked or not matches(p, contract.editable)]
        if bad:
            out.append(f"patch {patch.id} touches files outside the editable set: {bad}")
    return out


def _timing(contract: Contract, baseline: TrialRecord, cand: TrialRecord) -> list[str]:
    m = cand.metrics
    if m.outside_train_span_s is None:
        return ["no outside timing of the training was recorded"]
    covered = m.step_times_s[len(m.step_times_s) - (m.outside_span_steps or m.steps):]
    reported = sum(covered)
    floor = m.outside_train_span_s * (1 - TIMING_SLACK_FRACTION) - TIMING_SLACK_S
    if reported < floor:
        return [f"reported step times add up to {reported:.3f} s but the harness saw the "
                f"training take {m.outside_train_span_s:.3f} s: a faked timer or forged metrics"]
    return []


def _contract_hash(contract: Contract, baseline: TrialRecord, cand: TrialRecord) -> list[str]:
    if cand.contract_hash not in (None, contract.contract_hash):
        return [f"the trial ran under another contract ({cand.contract_hash[:12]})"]
    return []
