"""Tolerances calibrated, not guessed: this baseline's numerical noise floor, per kind of change.

Two runs that must compute the same training — the baseline and the baseline with another
split of the same global batch (a micro-batch or rank-count change) — still differ by float
reassociation; a bf16 run differs by its rounding; an MoE whose balancing loss is taken per
micro-batch differs more under another split. Doctor measures each kind's floor on the
harness's evidence (final parameters and held-out loss, see ``verify.evidence``) and on the
reported loss curve, and sets each kind's tolerance to a stated multiple of its floor, never
below a minimum. A candidate is then judged by the tolerances of the kinds of change it makes
(``Equivalence.tolerances``): a patch that keeps the split is held to the strict base, not to
the largest floor of any variant. A workload that saves no parameters (a user's script that
only prints its loss) is still calibrated on its reported loss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from infrarsi.contract import Equivalence
from infrarsi.identity import changed_knobs
from infrarsi.trial import TrialRecord, TrialStatus, prepare, run_trial
from infrarsi.verify import loss_drift, sampled_drift_sd
from infrarsi.verify.evidence import held_out_share, load_params, weight_distance
from infrarsi.workloads import change_kinds
from infrarsi.workloads import knobs as knob_rules
from infrarsi.workloads.kinds import KINDS, ChangeKind
from infrarsi.workloads.knobs import precision_named
from infrarsi.workloads.manifest import Manifest

MULTIPLE = {"fp32": 10.0, "bf16": 3.0}
# A knob's kind of change (another split, another rank count) is judged at a few times what
# Doctor saw an honest change of that kind move, on a candidate whose code is the baseline's:
# a patch never borrows it (it is judged against the same knobs without it, see
# ``verify.reference``). At 10x, MoE splits that move 1.8e-2 were allowed 0.37.
KIND_MULTIPLE = 4.0
# The printed loss of another split is another sample (e.g. the last micro-batch's loss): its
# drift is sampling noise of the same size for any split, not reassociation that grows with
# every change, so a smaller multiple of it suffices.
LOSS_MULTIPLE = 3.0
# The kinds whose printed loss may be another sample of the same training (another split's
# micro-batch): their loss floor is at least the drift's spread read from the step-wise
# differences (``verify.sampled_drift_sd``), not the one draw of the drift the calibration run
# made. On the micro-batch fixture (one micro-batch's loss printed), replayed offline over 120
# seeds: 3x one draw refused an honest split in 12-19% of comparisons at fresh seeds (the
# Doctor's tolerance 27% at its seed; Apply refused batch 8 at 33%), 3x the spread in 1.6-3.3%,
# while a split that drops the accumulation's division was still caught in 80% (85% before).
SAMPLED_KINDS = frozenset(kind.value for kind, row in KINDS.items() if row.sampled)
# Honest fp32 patches moved the reference workloads' weights by up to 2.3e-5 of what was
# learned at tiny scale (float reassociation), the held-out loss by up to 2e-6; the weakest
# cheat measured (weight decay dropped) by 3.5e-3 and 4.7e-4.
MINIMUM = {
    "weight_fp32": 2e-4,
    "eval_fp32": 5e-5,
    "weight_bf16": 1e-2,
    "eval_bf16": 1e-3,
    "loss": 1e-4,
}


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
        value = (
            True
            if knob.type == "bool"
            else next((v for v in knob.values if precision_named(str(v)) == "bf16"), None)
        )
        if value is not None:
            return knob_rules.resolve(manifest, scale, {name: value})
    return None


def distances(baseline: TrialRecord, other: TrialRecord) -> dict[str, float]:
    """The distances of ``other`` from ``baseline`` that both trials left evidence for, as
    shares of what the baseline learned — the quantities ``verify.evidence`` bounds:
    ``weight`` where both saved their parameters, ``eval`` where both have a held-out loss.
    Each evidence is calibrated wherever Apply will judge by it."""
    b, o = baseline.evaluation, other.evaluation
    out: dict[str, float] = {}
    if not _usable(b) or not _usable(o):
        return out
    assert b is not None and o is not None  # _usable
    wb, wc, w0 = (load_params(p) for p in (b.final_weights, o.final_weights, b.initial_weights))
    if wb is not None and wc is not None and w0 is not None:
        out["weight"] = weight_distance(wb, wc, w0, set(b.inert_params))
    if b.eval_loss is not None and o.eval_loss is not None and b.initial_eval_loss is not None:
        out["eval"] = held_out_share(b.eval_loss, o.eval_loss, b.initial_eval_loss)
    return out


def _usable(ev) -> bool:
    return ev is not None and not ev.error


def evidence_of(record: TrialRecord) -> tuple[bool, bool]:
    """(saved initial and final parameters, has a held-out loss before and after)."""
    ev = record.evaluation
    if not _usable(ev):
        return False, False
    assert ev is not None
    weights = ev.initial_weights is not None and ev.final_weights is not None
    return weights, ev.eval_loss is not None and ev.initial_eval_loss is not None


def floors_of(
    manifest: Manifest, baseline: TrialRecord, other: TrialRecord, last_k: int
) -> dict[str, float]:
    """The floors one variant measures, keyed ``<quantity>_<kind>`` for each kind of change it
    makes (``weight``/``eval`` where both runs left evidence, ``loss`` always), plus
    ``weight_fp32``/``eval_fp32`` or ``_bf16`` by precision (the overall floors shown)."""
    kinds = change_kinds(manifest, baseline.knobs, other.knobs) or frozenset({"rerun"})
    lowered = any(KINDS[ChangeKind(k)].precision != "fp32" for k in kinds - {"rerun"})
    precision = "bf16" if lowered else "fp32"
    ref, got = baseline.measured.loss, other.measured.loss
    values = {"loss": max(loss_drift(ref, got, last_k))}
    if kinds & SAMPLED_KINDS:  # another split prints another sample: its spread, not one draw
        values["loss"] = max(values["loss"], sampled_drift_sd(ref, got, last_k))
    values.update(distances(baseline, other))
    out = {}
    for quantity, value in values.items():
        for key in [f"{quantity}_{kind}" for kind in kinds] + (
            [f"{quantity}_{precision}"] if quantity != "loss" else []
        ):
            out[key] = value
    return out


def calibrate(
    manifest: Manifest,
    scale: str,
    baseline: TrialRecord,
    workdir,
    run: Callable[[str, dict], TrialRecord] | None = None,
    repeats: Sequence[TrialRecord] = (),
    last_k: int = 3,
) -> tuple[Equivalence, list[str]]:
    """Measured floors and the tolerances they give, and notes on what could not be measured.
    ``run(label, knobs)`` runs one trial under a knob assignment (the Doctor passes its
    executor's runner; by default the trial runs here, in ``workdir``);
    ``repeats`` are further runs of the baseline (the re-run floor: 0 where the hardware is
    deterministic)."""
    run = run or (lambda label, knobs: run_trial(prepare(manifest, scale, knobs), workdir))
    floors: dict[str, float] = {}
    notes: list[str] = []
    weights, held_out = evidence_of(baseline)
    if not weights:
        notes.append(
            "the workload saves no initial and final parameters: tolerances calibrated on "
            + ("the held-out loss and " if held_out else "")
            + "the reported loss"
        )
    elif not held_out:
        notes.append(
            "no held-out loss (no evaluation command): tolerances calibrated on the final "
            "parameters and the reported loss, as Apply judges them"
        )
    bf16 = bf16_variant(manifest, scale)
    variants = [a for a in equivalent_splits(manifest, scale, baseline.knobs)]
    variants += [bf16] if bf16 is not None else []
    if not variants:
        notes.append("no knob splits the batch or sets the precision: nothing to calibrate on")
    others = [r for r in repeats if r.status is TrialStatus.OK and r.metrics is not None]
    for assignment in variants:
        changed = changed_knobs(assignment, baseline.knobs)
        record = run(f"calibration ({changed})", assignment)
        if (
            record.status is not TrialStatus.OK
            or record.metrics is None
            or (record.evaluation is not None and record.evaluation.error)
        ):
            notes.append(f"the calibration run {changed} ended {record.status.value}")
            continue
        others.append(record)
    for record in others:
        for key, value in floors_of(manifest, baseline, record, last_k).items():
            floors[key] = max(floors.get(key, 0.0), value)
    return tolerances(floors), notes


def tolerances(floors: dict[str, float]) -> Equivalence:
    """The base fp32 tolerance: a multiple of the re-run floor, at least the minimum (a
    candidate that shares split, ranks and precision differs by reassociation only); bf16's
    from its floor; each kind of change its multiple of that kind's floor, at least the
    minimum. The default where nothing was measured."""
    default = Equivalence()
    values = {}
    for kind, field, precision in (
        ("weight", "weight_rtol", "fp32"),
        ("eval", "eval_rtol", "fp32"),
        ("weight", "weight_rtol_bf16", "bf16"),
        ("eval", "eval_rtol_bf16", "bf16"),
    ):
        floor = (
            floors.get(f"{kind}_rerun", 0.0) if precision == "fp32" else floors.get(f"{kind}_bf16")
        )
        measured = any(k.startswith(kind + "_") for k in floors)
        values[field] = (
            max(MULTIPLE[precision] * floor, MINIMUM[f"{kind}_{precision}"])
            if floor is not None and measured
            else getattr(default, field)
        )
    by_kind = {}
    multiples = {**MULTIPLE, "kind": KIND_MULTIPLE}
    for kind, row in ((k.value, r) for k, r in KINDS.items()):
        multiple, precision = multiples[row.multiple], row.precision
        own = {
            q: max(
                (LOSS_MULTIPLE if q == "loss" else multiple) * floors[f"{q}_{kind}"],
                MINIMUM["loss" if q == "loss" else f"{q}_{precision}"],
            )
            for q in ("weight", "eval", "loss")
            if f"{q}_{kind}" in floors
        }
        if own:
            by_kind[kind] = own
    return Equivalence(
        **values,
        by_kind=by_kind,
        calibrated=bool(floors),
        floors=floors,
        multiple=multiples,
    )
