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

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from infrarsi.contract import Contract, ContractError
from infrarsi.identity import differing_knobs
from infrarsi.records.trial import TrialMetrics, TrialRecord, TrialStatus
from infrarsi.sandbox.ownership import owns
from infrarsi.trial.patching import matches
from infrarsi.verify import clock, evidence, timing
from infrarsi.verify.reference import References, precision_ran
from infrarsi.workloads import Manifest, change_kinds, precision_of
from infrarsi.workloads.kinds import KINDS

# What the launchers hold varies little between configs of one workload (torchrun's agent with
# PyTorch imported); a rank that parks memory in it (the rendezvous store) moves it by more.
LAUNCHER_SLACK_BYTES, LAUNCHER_SLACK_FRACTION = 64 * 2**20, 0.25


@dataclass
class Verdict:
    """``valid`` or not, with every reason (empty when valid); ``flags`` are what the static
    screen noticed in the patches (shown, never decisive); ``not_checked`` names the checks
    that could not run, and why; ``ran`` the comparisons made beyond the baseline (the
    same-knob reference, the patch at fp32, the precision that ran, process ownership)."""

    valid: bool
    reasons: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)


@dataclass
class _Case:
    contract: Contract
    baseline: TrialRecord
    cand: TrialRecord
    base_m: TrialMetrics  # what each measured (both ended ok with metrics)
    cand_m: TrialMetrics
    bf16: bool
    kinds: frozenset[str] = frozenset()
    manifest: Manifest | None = None


def verify(
    contract: Contract,
    baseline: TrialRecord,
    candidate: TrialRecord,
    references: References | None = None,
) -> Verdict:
    """Judge ``candidate`` against ``baseline`` under ``contract``.

    A candidate without a patch, or whose patch keeps the baseline's knobs, is compared with
    the baseline, by the kinds of change its knobs make. A patch with other knobs K is judged
    differentially (``reference.needed`` says which runs that takes): the same knobs without
    the patch against the baseline, by the kinds K makes (the knobs' own effect, Doctor's to
    calibrate), and the candidate against that reference at the strict base (the patch's own
    effect may be no larger than re-running one config moves it). A bf16 candidate's patch is
    judged at fp32 (K at fp32, with and without it), the candidate held within the bf16
    tolerance of the bf16 reference, and measurably away from its own fp32 run (the
    precision the knob asks for is the precision that ran)."""
    flags = [f"{p.id}: {flag}" for p in candidate.patches for flag in p.flags]
    ended = _ended(baseline, candidate)
    if ended:
        return Verdict(False, ended, flags)
    manifest = _manifest(contract)
    kinds = _kinds(manifest, baseline, candidate)
    ran, not_checked = _provenance(candidate)
    refs = references or References()
    timed, timed_ran = clock.judge(contract, baseline, candidate, refs)
    if not candidate.patches or not kinds:
        reasons, unchecked = compare(contract, manifest, baseline, candidate, kinds)
        if candidate.patches and not kinds:
            ran.append("same-knob reference: the baseline (the patch keeps its knobs)")
        reasons += timed
        return Verdict(not reasons, reasons, flags, not_checked + unchecked, ran + timed_ran)
    reasons, unchecked, more = _differential(contract, manifest, baseline, candidate, kinds, refs)
    reasons += timed
    return Verdict(not reasons, reasons, flags, not_checked + unchecked, ran + more + timed_ran)


def _ended(baseline: TrialRecord, candidate: TrialRecord) -> list[str]:
    """Why the comparison cannot start: a trial that did not end ok with metrics."""
    if candidate.status is not TrialStatus.OK:
        return [f"the trial ended {candidate.status.value}: {candidate.error}"]
    if baseline.status is not TrialStatus.OK:
        return [f"the baseline ended {baseline.status.value}"]
    if baseline.metrics is None or candidate.metrics is None:
        return ["a trial that ended ok carries no metrics"]
    return []


def _provenance(cand: TrialRecord) -> tuple[list[str], list[str]]:
    """(what ran, what could not be checked) of how the candidate was run: who owned its
    processes, and the challenge seed it ran at."""
    owned = owns(cand.ownership)
    ran = (
        [f"process ownership: {cand.ownership} (no process outlived the launcher)"] if owned else []
    )
    not_checked = [] if owned else [f"process ownership: {cand.ownership or 'not recorded'}"]
    if cand.seed is None:
        return ran, not_checked
    ran.append(f"challenge seed: {cand.seed} (drawn at verification, set by the harness)")
    initial_saved = cand.evaluation is not None and cand.evaluation.initial_weights is not None
    if cand.seed_set_by == "bootstrap" and not initial_saved:
        not_checked.append(
            "challenge seed: the script takes no seed parameter and saves no initial "
            "parameters, so whether the offset seed took effect cannot be seen"
        )
    return ran, not_checked


def compare(
    contract: Contract,
    manifest: Manifest | None,
    baseline: TrialRecord,
    candidate: TrialRecord,
    kinds: frozenset[str],
    *,
    equivalence_only: bool = False,
    bf16: bool | None = None,
) -> tuple[list[str], list[str]]:
    """One comparison: (reasons ``candidate`` fails against ``baseline``, what could not be
    checked), judged by the tolerances of ``kinds`` and of the precision (``bf16``: whether
    either ran in bf16, unless given). ``equivalence_only``: only whether the two learned the
    same thing (a reference: its time and memory are not what is promoted, it runs no
    patch)."""
    ended = _ended(baseline, candidate)
    if ended:
        return ended, []
    assert baseline.metrics is not None and candidate.metrics is not None
    case = _Case(
        contract,
        baseline,
        candidate,
        baseline.metrics,
        candidate.metrics,
        _involves_bf16(manifest, baseline, candidate) if bf16 is None else bf16,
        kinds,
        manifest,
    )
    found = [c.decide(case) for c in CHECKS if c.on_references or not equivalence_only]
    return [r for f in found for r in f.reasons], [n for f in found for n in f.not_checked]


def _differential(
    contract: Contract,
    manifest: Manifest | None,
    baseline: TrialRecord,
    cand: TrialRecord,
    kinds: frozenset[str],
    refs: References,
) -> tuple[list[str], list[str], list[str]]:
    """(reasons, not checked, comparisons made) of a patch that also changes the knobs."""
    named = ", ".join(sorted(kinds))
    if refs.same_knobs is None:
        return (
            [
                f"the candidate changes the knobs ({named}) and carries a patch: the patch is "
                "judged against the same knobs without it, and that run was not measured"
            ],
            [],
            [],
        )
    ref = refs.same_knobs
    knob_reasons, unchecked = compare(
        contract, manifest, baseline, ref, kinds, equivalence_only=True
    )
    reasons = [f"the same knobs without the patch, against the baseline: {r}" for r in knob_reasons]
    ran = [f"same-knob reference: {ref.trial_id} (its knobs judged by {named})"]
    if ref.mem_cap_bytes is None and cand.mem_cap_bytes is not None:
        ran[-1] += "; it ran uncapped: it does not fit the capacity without the patch"
    if _involves_bf16(manifest, ref, cand) and "precision" in kinds:
        more, more_ran = _bf16_patch(contract, manifest, ref, cand, refs)
        return reasons + more, unchecked, ran + more_ran
    patch_reasons, patch_unchecked = compare(contract, manifest, ref, cand, frozenset())
    return reasons + patch_reasons, unchecked + patch_unchecked, ran


def _bf16_patch(
    contract: Contract,
    manifest: Manifest | None,
    ref: TrialRecord,
    cand: TrialRecord,
    refs: References,
) -> tuple[list[str], list[str]]:
    """A bf16 candidate's patch: its numerical effect judged at fp32, the candidate within
    the bf16 tolerance of the bf16 reference, and the bf16 it claims actually run."""
    reasons: list[str] = []
    ran: list[str] = []
    near, _ = compare(contract, manifest, ref, cand, frozenset(), bf16=True)
    reasons += near
    if refs.fp32_same_knobs is None or refs.fp32_candidate is None:
        reasons.append(
            "a bf16 candidate's patch is judged at fp32 (its knobs at fp32, with and without "
            "it): those runs were not measured"
        )
        return reasons, ran
    at_fp32, _ = compare(
        contract, manifest, refs.fp32_same_knobs, refs.fp32_candidate, frozenset(), bf16=False
    )
    reasons += [f"the patch at fp32 (its knobs at fp32, with and without it): {r}" for r in at_fp32]
    with_it, without = refs.fp32_candidate.trial_id, refs.fp32_same_knobs.trial_id
    ran.append(f"the patch at fp32: {with_it} against {without}")
    claimed = precision_ran(contract, ref, cand, refs.fp32_same_knobs, refs.fp32_candidate)
    return reasons + claimed.reasons, ran + claimed.ran


# Where the contract's workload cannot be loaded: the reference workloads' knob names.
FALLBACK_KINDS = {row.fallback_knob: kind.value for kind, row in KINDS.items()}


def _manifest(contract: Contract) -> Manifest | None:
    try:
        return contract.manifest()
    except ContractError:
        return None


def _involves_bf16(manifest: Manifest | None, baseline: TrialRecord, cand: TrialRecord) -> bool:
    if manifest is None:
        return any(r.knobs.get("precision") == "bf16" for r in (baseline, cand))
    return "bf16" in {precision_of(manifest, r.knobs) for r in (baseline, cand)}


def _kinds(manifest: Manifest | None, baseline: TrialRecord, cand: TrialRecord) -> frozenset[str]:
    """The kinds of change the candidate makes (split, ranks, precision): it is judged by the
    noise floors of these, and of no other."""
    if manifest is None:
        differ = differing_knobs(baseline.knobs, cand.knobs, FALLBACK_KINDS)
        return frozenset(kind for knob, kind in FALLBACK_KINDS.items() if knob in differ)
    return change_kinds(manifest, baseline.knobs, cand.knobs)


def _workload(case: _Case) -> list[str]:
    """The workload's tokens per step, and its steps: the contract's, or the step count the
    harness ran both at (Apply's timed runs) — never one the trial chose."""
    out, m, inv = [], case.cand_m, case.contract.invariants
    if m.tokens_per_step != inv.tokens_per_step:
        out.append(f"tokens per step differ: {m.tokens_per_step} vs {inv.tokens_per_step}")
    asked = case.cand.steps or inv.steps
    if case.manifest is not None:
        asked = case.manifest.launch.steps_printed(asked)
    if m.steps != asked:
        out.append(f"steps differ: {m.steps} vs {asked}")
    if case.cand.steps != case.baseline.steps:
        out.append(
            f"ran {case.cand.steps or inv.steps} steps, the run it is judged against "
            f"{case.baseline.steps or inv.steps}: runs are compared at one step count"
        )
    return out


def fall(curve: list[float], last_k: int) -> float:
    """How far a loss curve fell: the mean of its first ``last_k`` steps less that of its last."""
    return statistics.fmean(curve[:last_k]) - statistics.fmean(curve[-last_k:])


def loss_drift(ref: list[float], got: list[float], last_k: int) -> tuple[float, float]:
    """(drift of what was learned, worst step's drift) of the loss curve ``got`` from ``ref``:
    ``|fall_got / fall_ref - 1|`` with the fall from the first to the last ``last_k`` steps'
    mean (0 when the reference did not fall), and the largest ``|got_i / ref_i - 1|``."""
    fall_ref, fall_got = fall(ref, last_k), fall(got, last_k)
    learned = abs(fall_got / fall_ref - 1) if fall_ref > 0 else 0.0
    pointwise = max((abs(g / r - 1) for g, r in zip(got, ref) if r), default=0.0)
    return learned, pointwise


def sampled_drift_sd(ref: list[float], got: list[float], last_k: int) -> float:
    """The standard deviation the learned drift (``loss_drift``'s first figure) would have if
    the two curves differed by sampling noise alone: two runs of the same training that print
    another sample of its loss (another split's last micro-batch) differ step by step by that
    noise only, so its spread is read from their step-wise differences (one figure per step,
    not the one draw the drift itself is), carried through the means of ``last_k`` steps and
    the reference's fall. 0 when the reference did not fall or the curves are too short."""
    if len(ref) != len(got) or len(ref) < 3:
        return 0.0
    fall_ref = fall(ref, last_k)
    if fall_ref <= 0:
        return 0.0
    spread = statistics.stdev(g - r for g, r in zip(got, ref))
    return spread * math.sqrt(2 / last_k) / fall_ref


def _loss(case: _Case) -> list[str]:
    """The fall of the reported loss must match the baseline's; each step's loss too. The
    tolerance is the contract's, or what Doctor measured for the kinds of change the candidate
    makes when that is larger (a script that prints one micro-batch's loss prints another
    sample of the same training under another split)."""
    ref, got = case.base_m.loss, case.cand_m.loss
    if len(ref) != len(got):
        return [f"loss trajectory has {len(got)} steps, the baseline's {len(ref)}"]
    k = case.contract.correctness.last_k
    tol = max(
        case.contract.correctness.loss_rtol(case.bf16),
        case.contract.equivalence.loss_rtol(case.kinds),
    )
    learned, pointwise = loss_drift(ref, got, k)
    out = []
    if learned > tol:
        out.append(
            f"loss drift: the loss fell by {fall(got, k):.5f} over the run, the baseline's by "
            f"{fall(ref, k):.5f} "
            f"({learned:.2%}; tolerance {tol:.2%})"
        )
    if case.contract.correctness.pointwise and pointwise > tol:
        step = max(range(len(ref)), key=lambda i: abs(got[i] / ref[i] - 1) if ref[i] else 0.0)
        out.append(f"loss drift: step {step} differs by {pointwise:.2%} (tolerance {tol:.2%})")
    return out


def _memory(case: _Case) -> list[str]:
    cap = case.contract.mem_cap_bytes
    if cap is None:
        return []
    peaks = case.cand_m.peak_mem_bytes
    over = [f"rank {r}: {b} bytes" for r, b in enumerate(peaks) if b is not None and b > cap]
    unknown = [r for r, b in enumerate(peaks) if b is None]
    out = [f"peak memory over the capacity of {cap} bytes on {', '.join(over)}"] if over else []
    if unknown:
        out.append(
            f"peak memory of rank(s) {unknown} was not measured: the capacity of {cap} "
            "bytes cannot be checked"
        )
    return out


def _memory_outside_ranks(case: _Case) -> list[str]:
    """Memory the ranks' cgroups do not see — held by a launcher, e.g. values a rank put into
    the rendezvous store — may not grow past the baseline's by more than its noise."""
    base = case.base_m.launcher_peak_mem_bytes
    cand = case.cand_m.launcher_peak_mem_bytes
    if base is None or cand is None:
        return []
    allowed = max(LAUNCHER_SLACK_BYTES, int(LAUNCHER_SLACK_FRACTION * base))
    held = (
        f"the processes outside the ranks (the launchers) peaked at {cand} bytes, the "
        f"baseline's at {base} (allowed {allowed} more): memory held where the ranks' "
        "capacity does not look"
    )
    return [held] if cand - base > allowed else []


def _locked(case: _Case) -> list[str]:
    changed = sorted(
        p
        for p, digest in case.contract.locked.items()
        if p in case.cand.locked_files and case.cand.locked_files[p] != digest
    )
    return [f"locked files changed: {', '.join(changed)}"] if changed else []


def _patch_paths(case: _Case) -> list[str]:
    out = []
    for patch in case.cand.patches:
        bad = [
            p
            for p in patch.paths
            if p in case.contract.locked or not matches(p, case.contract.editable)
        ]
        if bad:
            out.append(f"patch {patch.id} touches files outside the editable set: {bad}")
    return out


def _timing(case: _Case) -> list[str]:
    """Reported step times against the harness's clock (``timing.reported_vs_seen``)."""
    return timing.reported_vs_seen(case.cand_m)


def _same_host(case: _Case) -> list[str]:
    """Times are compared on one host only: a candidate that ran on a host with another
    fingerprint than the baseline it is judged against (another cluster node, another
    machine) is refused. Records from before fingerprints were kept pass."""
    mine, theirs = case.cand.fingerprint, case.baseline.fingerprint
    elsewhere = (
        f"ran on another host (fingerprint {mine}, node {case.cand.node}) than the "
        f"baseline (fingerprint {theirs}, node {case.baseline.node}): times are "
        "compared on one host only"
    )
    return [elsewhere] if mine and theirs and mine != theirs else []


def _seed(case: _Case) -> list[str]:
    """Two runs are compared at one seed: a challenge seed the harness drew is set for the
    baseline, the references and the candidate alike."""
    mine, theirs = case.cand.seed, case.baseline.seed
    if mine != theirs:

        def named(seed: int | None) -> str:
            return f"seed {seed}" if seed is not None else "the contract's seed"

        return [
            f"ran with {named(mine)}, the run it is judged against with {named(theirs)}: "
            "runs are compared at one seed"
        ]
    return []


def _contract_hash(case: _Case) -> list[str]:
    out = []
    for name, record in (("the candidate", case.cand), ("the baseline", case.baseline)):
        if record.contract_hash is None:
            out.append(
                f"{name} did not run under the contract (no contract hash): its capacity "
                "and invariants were not applied; run it with --contract"
            )
        elif record.contract_hash != case.contract.contract_hash:
            out.append(f"{name} ran under another contract ({record.contract_hash[:12]})")
    return out


def _evidence(case: _Case) -> evidence.Findings:
    return evidence.check(case.contract, case.baseline, case.cand, case.bf16, case.kinds)


@dataclass(frozen=True)
class Check:
    """One check of a comparison: its name, its decision on the case (the reasons it fails,
    what it could not check), and whether it also judges a reference run against the baseline
    (whether the two learned the same thing: a reference's time and memory are not what is
    promoted, and it runs no patch)."""

    name: str
    decide: Callable[[_Case], evidence.Findings]
    on_references: bool = False

    @classmethod
    def of(
        cls, name: str, reasons: Callable[[_Case], list[str]], on_references: bool = False
    ) -> Check:
        """A check that only gives reasons (everything it needs is in every record)."""
        return cls(name, lambda case: evidence.Findings(reasons(case)), on_references)


# Every check ``compare`` makes, in the order its reasons are said: a new check is a function
# of the case and one line here.
CHECKS: tuple[Check, ...] = (
    Check.of("contract", _contract_hash, on_references=True),
    Check.of("challenge seed", _seed, on_references=True),
    Check.of("same host", _same_host),
    Check.of("workload", _workload, on_references=True),
    Check.of("locked files", _locked),
    Check.of("patch paths", _patch_paths),
    Check.of("reported loss", _loss, on_references=True),
    Check.of("memory", _memory),
    Check.of("memory outside the ranks", _memory_outside_ranks),
    Check.of("reported step times", _timing),
    Check("harness's evidence", _evidence, on_references=True),
)


def evidence_strength(contract: Contract, not_checked: list[str]) -> str:
    """One sentence a report can show: how strong the evidence behind a verdict was."""
    if not not_checked:
        return (
            "strong: final parameters and held-out loss judged by the reference code, the "
            "loss curve, the harness's clock and memory"
        )
    eq = contract.equivalence
    if any("final parameters" in n for n in not_checked):
        loss = (
            "calibrated per kind of change on the workload's own printed losses"
            if any("loss" in t for t in eq.by_kind.values())
            else "judged at the contract's tolerance (not calibrated: run doctor)"
        )
        return (
            f"weaker: no final parameters or held-out evaluation (the manifest names none); "
            f"the reported loss curve, {loss}, the harness's clock and memory"
        )
    return "partial: " + "; ".join(not_checked)
