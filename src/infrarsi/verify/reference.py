"""The runs a patched candidate is judged against besides the baseline, and the checks only they
make possible.

A knob's own effect on what is learned (another split of the batch, another rank count, bf16)
is the Doctor's to calibrate; a patch's is not a knob's, so it may not borrow a knob's
tolerance. A candidate with knobs K and a patch P is therefore judged against the **same
knobs without the patch** (``same_knobs``), which is itself judged against the baseline by the
kinds K makes. In bf16 an honest reordering moves the weights about as far as a small cheat, so
the patch's numerical effect is judged at fp32 (K at fp32 without and with P:
``fp32_same_knobs``, ``fp32_candidate``), and the bf16 candidate must differ from its own fp32
run about as much as the bf16 reference differs from its fp32 one (``precision_ran``): a patch
that quietly runs fp32 under a bf16 label does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infrarsi.contract import Contract
from infrarsi.enums import ValueEnum
from infrarsi.identity import config_key
from infrarsi.records.trial import TrialRecord
from infrarsi.verify.evidence import known_params, weight_distance
from infrarsi.workloads import Manifest, change_kinds, precision_of

# The bf16 candidate's distance from its own fp32 run, as a share of the bf16 reference's from
# its fp32 one, below which bf16 did not run: rounding moves both by the same order (measured
# at tiny scale: see docs/verification.md), a run that stays fp32 by ~0.
PRECISION_SHARE = 0.25
Knobs = dict[str, Any]


class Role(ValueEnum):
    """What a reference run is for."""

    SAME_KNOBS = "same_knobs"  # the candidate's knobs, no patch
    FP32_SAME_KNOBS = "fp32_same_knobs"  # its knobs at fp32, no patch (a bf16 candidate)
    FP32_CANDIDATE = "fp32_candidate"  # its knobs at fp32, with its patches
    # the run a patch is timed against, once more at its seed: its start-up measured twice
    # before a candidate's start line is refused against it (``verify.clock.start_reasons``)
    START_AGAIN = "start_again"


@dataclass(frozen=True)
class References:
    """The reference runs of one candidate that were measured (None: not measured)."""

    same_knobs: TrialRecord | None = None
    fp32_same_knobs: TrialRecord | None = None
    fp32_candidate: TrialRecord | None = None
    start_again: TrialRecord | None = None

    @classmethod
    def of(cls, runs: dict[Role, TrialRecord]) -> References:
        return cls(**{str(role): record for role, record in runs.items()})


def needed(
    manifest: Manifest,
    baseline_knobs: Knobs,
    knobs: Knobs,
    patches: list[str],
    timed: bool = False,
) -> dict[Role, tuple[Knobs, list[str]]]:
    """The (knobs, patches) of every run ``verify`` needs for this candidate besides the
    baseline and the candidate itself: none for a candidate without a patch or with the
    baseline's knobs. ``timed`` (a throughput objective): a patch is also timed against the
    same knobs without it, so any other knobs (threads, compile) need that run too."""
    if not patches:
        return {}
    if not change_kinds(manifest, baseline_knobs, knobs):
        other = timed and config_key(baseline_knobs) != config_key(knobs)
        return {Role.SAME_KNOBS: (dict(knobs), [])} if other else {}
    out: dict[Role, tuple[Knobs, list[str]]] = {Role.SAME_KNOBS: (dict(knobs), [])}
    if precision_of(manifest, knobs) != "fp32":
        fp32 = fp32_knobs(manifest, knobs, baseline_knobs)
        if fp32 is not None:
            out[Role.FP32_SAME_KNOBS] = (fp32, [])
            out[Role.FP32_CANDIDATE] = (fp32, list(patches))
    return out


def fp32_knobs(manifest: Manifest, knobs: Knobs, baseline_knobs: Knobs) -> Knobs | None:
    """``knobs`` with every precision knob as the baseline has it, when that is fp32."""
    out = dict(knobs)
    for name in manifest.knobs_with_role("precision"):
        if name in baseline_knobs:
            out[name] = baseline_knobs[name]
        else:
            out.pop(name, None)
    return out if precision_of(manifest, out) == "fp32" else None


@dataclass
class Claimed:
    """Whether the precision the knobs ask for is the one that ran."""

    reasons: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)


def apart(low: TrialRecord, high: TrialRecord) -> float | None:
    """How far ``low``'s final parameters are from ``high``'s, as a share of what ``high``
    learned (None where either saved none)."""
    a, b = low.evaluation, high.evaluation
    if a is None or b is None:
        return None
    names = {**a.aliases, **b.aliases}  # a parameter by the reference's name, as verify reads it
    wl, wh = known_params(a.final_weights, names), known_params(b.final_weights, names)
    w0 = known_params(b.initial_weights, names)
    if wl is None or wh is None or w0 is None or set(wl) != set(wh):
        return None
    return weight_distance(wh, wl, w0, set(b.inert_params))


def precision_ran(
    contract: Contract,
    ref: TrialRecord,
    cand: TrialRecord,
    fp32_ref: TrialRecord,
    fp32_cand: TrialRecord,
) -> Claimed:
    """The bf16 candidate measurably away from its own fp32 run: at least ``PRECISION_SHARE``
    of how far the bf16 reference is from its fp32 one, and beyond the strict fp32 base."""
    out = Claimed()
    mine, theirs = apart(cand, fp32_cand), apart(ref, fp32_ref)
    if mine is None or theirs is None:
        out.not_checked.append("the precision that ran: the runs saved no comparable parameters")
        return out
    floor = max(PRECISION_SHARE * theirs, contract.equivalence.weight_rtol)
    out.ran.append(
        f"the precision that ran: {mine:.2e} from its fp32 run (the reference's {theirs:.2e})"
    )
    if mine < floor:
        out.reasons.append(
            f"the candidate ran as its fp32 counterpart did ({mine:.2e} apart; bf16 moves the "
            f"reference {theirs:.2e} from its fp32 run, at least {floor:.2e} expected): the "
            "precision its knobs ask for is not the precision that ran"
        )
    return out
