"""Knob assignments: the baseline at a scale, overrides, derived knobs, and constraint checks.

An assignment that breaks a constraint is rejected here, before anything runs, with an error
that names the constraint, the reason the manifest gives, and the values that broke it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infrarsi.errors import InfraRSIError
from infrarsi.identity import differing_knobs
from infrarsi.workloads import expr
from infrarsi.workloads.kinds import KINDS
from infrarsi.workloads.manifest import KnobValue, Manifest


class AssignmentError(InfraRSIError):
    """A knob assignment that is not allowed: unknown knob, value out of domain, or a constraint."""


def baseline(manifest: Manifest, scale: str) -> dict[str, KnobValue]:
    """The baseline assignment at a scale: every knob at its default, derived knobs derived."""
    return resolve(manifest, scale, {})


def resolve(manifest: Manifest, scale: str, overrides: Mapping[str, Any]) -> dict[str, KnobValue]:
    """Defaults, then the scale's defaults, then ``overrides``; derive the rest and check all."""
    preset = manifest.scale(scale)
    values: dict[str, KnobValue] = {}
    for knob in manifest.knobs:
        if knob.default is not None and knob.derive is None:
            values[knob.name] = knob.coerce(knob.default)
    for name, value in preset.knob_defaults.items():
        values[name] = manifest.knob(name).coerce(value)
    for name, value in overrides.items():
        values[name] = _coerce_override(manifest, name, value)
    env = {**preset.params, **values}
    for knob in manifest.knobs:
        if knob.name not in values and knob.derive is not None:
            values[knob.name] = knob.coerce(expr.evaluate(knob.derive, env))
            env[knob.name] = values[knob.name]
    values = inert_at_default(manifest, values, preset.params)
    _check_constraints(manifest, {**preset.params, **values})
    _check_domains(manifest, values)
    return {k.name: values[k.name] for k in manifest.knobs}


def inert_at_default(
    manifest: Manifest, values: Mapping[str, KnobValue], params: Mapping[str, Any]
) -> dict[str, KnobValue]:
    """``values`` with each knob whose ``inert_when`` holds set to its default: a knob that
    changes nothing there is one configuration, not two (a knob absent from ``values`` is
    left out)."""
    out = dict(values)
    env = {**params, **out}
    for knob in manifest.knobs:
        if knob.inert_when and knob.name in out and knob.default is not None:
            if expr.evaluate(knob.inert_when, env):
                out[knob.name] = knob.coerce(knob.default)
    return out


def parse_assignments(items: list[str]) -> dict[str, str]:
    """``["micro_batch=4", "precision=bf16"]`` -> a dict; a malformed item names the fix."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise AssignmentError(f"--set {item!r}: write KNOB=VALUE, e.g. --set micro_batch=4")
        out[name.strip()] = value.strip()
    return out


def _coerce_override(manifest: Manifest, name: str, value: Any) -> KnobValue:
    try:
        knob = manifest.knob(name)
    except KeyError as exc:
        raise AssignmentError(exc.args[0]) from None
    try:
        coerced = knob.coerce(value)
    except ValueError as exc:
        raise AssignmentError(f"knob {exc}") from None  # names the knob, the value, the domain
    if coerced not in knob.values:
        raise AssignmentError(f"knob {name}={value!r} is outside its domain {knob.values}")
    return coerced


def _check_domains(manifest: Manifest, values: dict[str, KnobValue]) -> None:
    for knob in manifest.knobs:
        if values[knob.name] not in knob.values:
            raise AssignmentError(
                f"knob {knob.name}={values[knob.name]!r} (derived by "
                f"{knob.derive!r}) is outside its domain {knob.values}"
            )


def _check_constraints(manifest: Manifest, env: dict[str, Any]) -> None:
    for constraint in manifest.constraints:
        if not expr.evaluate(constraint.expr, env):
            involved = {n: env[n] for n in sorted(expr.names(constraint.expr))}
            shown = ", ".join(f"{k}={v}" for k, v in involved.items())
            raise AssignmentError(
                f"constraint '{constraint.expr}' fails with {shown}: {constraint.why}"
            )


def precision_named(text: str) -> str | None:
    """The reduced precision a value's text names — ``bf16`` for ``bf16`` or PyTorch's own
    ``bfloat16``, ``fp16`` for ``fp16``, ``float16`` or ``half`` — None for any other (fp32,
    ``float32``, ``no``)."""
    text = text.lower()
    if "bf16" in text or "bfloat16" in text:
        return "bf16"
    if "fp16" in text or "float16" in text or "half" in text:
        return "fp16"
    return None


def precision_of(manifest: Manifest, values: Mapping[str, Any]) -> str:
    """The compute precision an assignment runs in (``fp32``, ``bf16`` or ``fp16``): the lowest
    that a knob with role ``precision`` selects — a choice's value in any common spelling
    (``precision_named``), or a true bool knob (whose name or flag says which; ``bf16`` when it
    does not)."""
    for name in manifest.knobs_with_role("precision"):
        knob, value = manifest.knob(name), values.get(name)
        if knob.type == "bool":
            text = f"{knob.name} {knob.flag or ''}" if value else ""
        else:
            text = str(value)
        named = precision_named(text)
        if named == "fp16":
            return "fp16"
        if named == "bf16" or (knob.type == "bool" and value):
            return "bf16"
    return "fp32"


def change_kinds(
    manifest: Manifest, base: Mapping[str, Any], other: Mapping[str, Any]
) -> frozenset[str]:
    """Which kinds of change (``kinds.ChangeKind``: ``split``, ``ranks``, ``precision``)
    ``other`` makes to ``base``: a knob with one of the kind's roles has another value.
    Verification judges a candidate by the noise floors of exactly these kinds."""
    return frozenset(
        kind.value
        for kind, row in KINDS.items()
        if differing_knobs(
            base, other, [name for role in row.roles for name in manifest.knobs_with_role(role)]
        )
    )
