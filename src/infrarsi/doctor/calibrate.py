"""Tolerances calibrated, not guessed: the numerical noise floor of this baseline.

Two runs that must compute the same training — the baseline and the baseline with another
split of the same global batch (a micro-batch or rank-count change) — still differ by float
reassociation; a bf16 run differs by its rounding. Doctor measures both floors on the harness's
evidence (final parameters and held-out loss, see ``verify.evidence``) and sets each tolerance
to a stated multiple of its floor, never below a minimum.
"""

from __future__ import annotations

from typing import Callable

import torch

from infrarsi.contract import Equivalence
from infrarsi.trial import TrialRecord, TrialStatus, prepare, run_trial
from infrarsi.workloads import knobs as knob_rules
from infrarsi.workloads.manifest import Manifest

MULTIPLE = {"fp32": 10.0, "bf16": 3.0}
MINIMUM = {"weight_fp32": 2e-5, "eval_fp32": 1e-5, "weight_bf16": 1e-2, "eval_bf16": 1e-3}


def equivalent_splits(manifest: Manifest, scale: str, base: dict) -> list[dict]:
    """Other knob assignments that split the same global batch differently — for each knob with
    role ``micro_batch`` or ``ranks``, its first other value the constraints allow. Not every
    such split computes bit-for-bit the same (an MoE balancing loss is taken per micro-batch),
    so the floor is the largest distance among them."""
    out = []
    for role in ("micro_batch", "ranks"):
        for name in manifest.knobs_with_role(role):
            for value in manifest.knob(name).values:
                if value == base.get(name):
                    continue
                try:
                    out.append(knob_rules.resolve(manifest, scale, {name: value}))
                    break
                except knob_rules.AssignmentError:
                    continue
    return out


def bf16_variant(manifest: Manifest, scale: str) -> dict | None:
    """The baseline computing in bf16, through the knob with role ``precision``."""
    for name in manifest.knobs_with_role("precision"):
        knob = manifest.knob(name)
        value = True if knob.type == "bool" else next(
            (v for v in knob.values if "bf16" in str(v).lower()), None)
        if value is not None:
            return knob_rules.resolve(manifest, scale, {name: value})
    return None


def distances(baseline: TrialRecord, other: TrialRecord) -> tuple[float, float]:
    """(weight, held-out) distance of ``other`` from ``baseline``, as shares of what the
    baseline learned — the quantities ``verify.evidence`` bounds."""
    load = lambda p: torch.load(p, map_location="cpu", weights_only=True)  # noqa: E731
    wb, w0 = load(baseline.evaluation.final_weights), load(baseline.evaluation.initial_weights)
    wo = load(other.evaluation.final_weights)
    norm = lambda ts: float(torch.sqrt(sum((t.double() ** 2).sum() for t in ts)))  # noqa: E731
    weight = norm(wo[n] - wb[n] for n in wb) / max(norm(wb[n] - w0[n] for n in wb), 1e-12)
    eb, e0 = baseline.evaluation.eval_loss, baseline.evaluation.initial_eval_loss
    held_out = abs(other.evaluation.eval_loss - eb) / max(e0 - eb, 1e-12)
    return weight, held_out


def calibrate(manifest: Manifest, scale: str, baseline: TrialRecord, workdir,
              run: Callable[[str, object], TrialRecord] | None = None,
              **trial_options) -> tuple[Equivalence, list[str]]:
    """Measured floors and the tolerances they give, and notes on what could not be measured.
    ``run(label, spec)`` runs one trial (Doctor passes its progress-keeping runner)."""
    run = run or (lambda label, spec: run_trial(spec, workdir))
    ev = baseline.evaluation
    if ev is None or ev.error or ev.initial_weights is None or ev.eval_loss is None:
        return Equivalence(), ["tolerances not calibrated: the workload saves no initial and "
                               "final parameters with an evaluation; defaults apply"]
    floors, notes = {}, []
    bf16 = bf16_variant(manifest, scale)
    variants = [("fp32", a) for a in equivalent_splits(manifest, scale, baseline.knobs)]
    variants += [("bf16", bf16)] if bf16 is not None else []
    for precision in ("fp32", "bf16"):
        if precision not in {p for p, _ in variants}:
            notes.append(f"no {precision} variant to calibrate with; its default applies")
    for precision, assignment in variants:
        changed = {k: v for k, v in assignment.items() if baseline.knobs.get(k) != v}
        record = run(f"calibration ({precision}, {changed})",
                     prepare(manifest, scale, assignment, **trial_options))
        if record.status is not TrialStatus.OK or record.evaluation is None or \
                record.evaluation.error:
            notes.append(f"the calibration run {changed} ended {record.status.value}")
            continue
        for kind, value in zip(("weight", "eval"), distances(baseline, record)):
            key = f"{kind}_{precision}"
            floors[key] = max(floors.get(key, 0.0), value)
    return tolerances(floors), notes


def tolerances(floors: dict[str, float]) -> Equivalence:
    """Each tolerance: its precision's multiple of the measured floor, at least the minimum;
    the default where the floor was not measured."""
    default = Equivalence()
    values = {}
    for kind in ("weight", "eval"):
        for precision in ("fp32", "bf16"):
            key = f"{kind}_{precision}"
            field = f"{kind}_rtol" + ("_bf16" if precision == "bf16" else "")
            values[field] = max(MULTIPLE[precision] * floors[key], MINIMUM[key]) \
                if key in floors else getattr(default, field)
    return Equivalence(**values, calibrated=bool(floors), floors=floors, multiple=MULTIPLE)
