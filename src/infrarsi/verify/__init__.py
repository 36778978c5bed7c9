"""Is a candidate's gain trustworthy? Every check of the contract, with every reason it fails.

The Run and Apply stages call ``verify(contract, baseline, candidate)``. A candidate is valid
only when it computed the same workload (tokens per step, steps), ran under this contract, its
patches touch only editable files and the locked files are byte-identical; when what it learned
matches the baseline — on the harness's own evidence (final parameters, held-out loss under the
unpatched model code, see ``evidence``) and on the reported loss, whose fall must match; when its
peak memory, as the harness measured it, stays under the capacity on every rank; and when the
step times it reports agree with the time the harness saw pass, step by step. Tolerances depend
on the precision: a comparison that involves bf16 uses the bf16 ones.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from infrarsi.contract import Contract, ContractError
from infrarsi.trial.patching import matches
from infrarsi.trial.record import TrialRecord, TrialStatus
from infrarsi.trial.watch import POLL_S
from infrarsi.verify import evidence
from infrarsi.workloads import precision_of

# The harness sees a line up to one polling period late, at both ends of a span; the loop does
# a little work outside its measured steps (a print, loss.item()).
TIMING_SLACK_FRACTION = 0.10
TIMING_SLACK_S = 2 * POLL_S + 0.03
TAIL_S = 10.0  # saving the final parameters and tearing down take a few seconds at most


@dataclass
class Verdict:
    """``valid`` or not, with every reason (empty when valid); ``flags`` are what the static
    screen noticed in the patches (shown, never decisive); ``not_checked`` names the checks
    that could not run, and why."""
    valid: bool
    reasons: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)


@dataclass
class _Case:
    contract: Contract
    baseline: TrialRecord
    cand: TrialRecord
    bf16: bool


def verify(contract: Contract, baseline: TrialRecord, candidate: TrialRecord) -> Verdict:
    """Judge ``candidate`` against ``baseline`` under ``contract``."""
    flags = [f"{p.id}: {flag}" for p in candidate.patches for flag in p.flags]
    if candidate.status is not TrialStatus.OK:
        return Verdict(False, [f"the trial ended {candidate.status.value}: {candidate.error}"],
                       flags)
    if baseline.status is not TrialStatus.OK:
        return Verdict(False, [f"the baseline ended {baseline.status.value}"], flags)
    case = _Case(contract, baseline, candidate, _involves_bf16(contract, baseline, candidate))
    reasons = []
    for check in (_contract_hash, _workload, _locked, _patch_paths, _loss, _memory, _timing):
        reasons += check(case)
    found = evidence.check(contract, baseline, candidate, case.bf16)
    return Verdict(not reasons and not found.reasons, reasons + found.reasons, flags,
                   found.not_checked)


def _involves_bf16(contract: Contract, baseline: TrialRecord, cand: TrialRecord) -> bool:
    try:
        manifest = contract.manifest()
    except ContractError:
        return any(r.knobs.get("precision") == "bf16" for r in (baseline, cand))
    return "bf16" in {precision_of(manifest, r.knobs) for r in (baseline, cand)}


def _workload(case: _Case) -> list[str]:
    out, m, inv = [], case.cand.metrics, case.contract.invariants
    if m.tokens_per_step != inv.tokens_per_step:
        out.append(f"tokens per step differ: {m.tokens_per_step} vs {inv.tokens_per_step}")
    if m.steps != inv.steps:
        out.append(f"steps differ: {m.steps} vs {inv.steps}")
    return out


def _loss(case: _Case) -> list[str]:
    """The fall of the reported loss must match the baseline's; each step's loss too."""
    ref, got = case.baseline.metrics.loss, case.cand.metrics.loss
    if len(ref) != len(got):
        return [f"loss trajectory has {len(got)} steps, the baseline's {len(ref)}"]
    tol, k = case.contract.correctness.loss_rtol(case.bf16), case.contract.correctness.last_k
    out = []
    learned_ref = statistics.fmean(ref[:k]) - statistics.fmean(ref[-k:])
    learned_got = statistics.fmean(got[:k]) - statistics.fmean(got[-k:])
    if learned_ref > 0:
        drift = abs(learned_got / learned_ref - 1)
        if drift > tol:
            out.append(f"loss drift: the loss fell by {learned_got:.5f} over the run, the "
                       f"baseline's by {learned_ref:.5f} ({drift:.2%}; tolerance {tol:.2%})")
    if case.contract.correctness.pointwise:
        worst, step = max((abs(g / r - 1), i) for i, (g, r) in enumerate(zip(got, ref)))
        if worst > tol:
            out.append(f"loss drift: step {step} differs by {worst:.2%} (tolerance {tol:.2%})")
    return out


def _memory(case: _Case) -> list[str]:
    cap = case.contract.mem_cap_bytes
    if cap is None:
        return []
    peaks = case.cand.metrics.peak_mem_bytes
    over = [f"rank {r}: {b} bytes" for r, b in enumerate(peaks) if b is not None and b > cap]
    unknown = [r for r, b in enumerate(peaks) if b is None]
    out = [f"peak memory over the capacity of {cap} bytes on {', '.join(over)}"] if over else []
    if unknown:
        out.append(f"peak memory of rank(s) {unknown} was not measured: the capacity of {cap} "
                   "bytes cannot be checked")
    return out


def _locked(case: _Case) -> list[str]:
    changed = sorted(p for p, digest in case.contract.locked.items()
                     if p in case.cand.locked_files and case.cand.locked_files[p] != digest)
    return [f"locked files changed: {', '.join(changed)}"] if changed else []


def _patch_paths(case: _Case) -> list[str]:
    out = []
    for patch in case.cand.patches:
        bad = [p for p in patch.paths
               if p in case.contract.locked or not matches(p, case.contract.editable)]
        if bad:
            out.append(f"patch {patch.id} touches files outside the editable set: {bad}")
    return out


def _timing(case: _Case) -> list[str]:
    """Reported step times against the harness's clock: in total, and step by step."""
    m = case.cand.metrics
    if m.outside_train_span_s is None:
        return ["no outside timing of the training was recorded"]
    covered = m.step_times_s[len(m.step_times_s) - (m.outside_span_steps or m.steps):]
    reported = sum(covered)
    floor = m.outside_train_span_s * (1 - TIMING_SLACK_FRACTION) - TIMING_SLACK_S
    if reported < floor:
        return [f"reported step times add up to {reported:.3f} s but the harness saw the "
                f"training take {m.outside_train_span_s:.3f} s: a faked timer or forged metrics"]
    return _per_step(m) + _tail(m)


def _tail(m) -> list[str]:
    """Training that goes on after the last step was reported: step lines written ahead."""
    limit = max(TAIL_S, m.outside_train_span_s)
    if m.harness_tail_s is not None and m.harness_tail_s > limit:
        return [f"the job ran {m.harness_tail_s:.1f} s after its last step was reported (the "
                f"reported training took {m.outside_train_span_s:.1f} s): steps reported ahead "
                "of the work"]
    return []


def _per_step(m) -> list[str]:
    seen = m.harness_step_times_s
    if not seen or len(seen) != len(m.step_times_s):
        return []
    short = [i for i, (got, saw) in enumerate(zip(m.step_times_s, seen))
             if saw is not None and got < saw * (1 - TIMING_SLACK_FRACTION) - TIMING_SLACK_S]
    if short:
        i = short[0]
        return [f"step {i} reported {m.step_times_s[i]:.3f} s but the harness saw it take "
                f"{seen[i]:.3f} s ({len(short)} such step(s)): time moved between steps or a "
                "slowed clock"]
    return []


def _contract_hash(case: _Case) -> list[str]:
    out = []
    for name, record in (("the candidate", case.cand), ("the baseline", case.baseline)):
        if record.contract_hash is None:
            out.append(f"{name} did not run under the contract (no contract hash): its capacity "
                       "and invariants were not applied; run it with --contract")
        elif record.contract_hash != case.contract.contract_hash:
            out.append(f"{name} ran under another contract ({record.contract_hash[:12]})")
    return out
