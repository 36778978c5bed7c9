"""When two configurations are the same one: the single rule every stage, searcher adapter and
benchmark uses.

A configuration is a knob assignment and a set of patches. Its identity is each knob's value in
one canonical spelling (``2``, ``2.0`` and ``"2"`` alike; ``True``, ``"true"`` and ``"True"``
alike) and the patch ids as a set. Over a search space's own dimensions (``dims``) a knob the
space does not vary is not part of the identity, so a proposal that leaves a constant knob out
names the same candidate as one that spells it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

ConfigKey = tuple[tuple[tuple[str, str], ...], tuple[str, ...]]


def canonical_value(value: object) -> str:
    """One spelling per knob value: a flag as ``true``/``false``, a whole number without its
    ``.0``, anything else as its text."""
    if isinstance(value, bool) or str(value).lower() in ("true", "false"):
        return "true" if value is True or str(value).lower() == "true" else "false"
    try:
        number = float(str(value))
    except ValueError:
        return str(value)
    if number.is_integer():
        return str(int(number))
    return repr(number)


def config_key(
    knobs: Mapping[str, object], patches: Iterable[str] = (), dims: Iterable[str] | None = None
) -> ConfigKey:
    """The identity of a configuration: (knob, canonical value) pairs by name and the sorted
    patch ids. With ``dims`` only those knobs count (a search space's own dimensions)."""
    names = sorted(knobs) if dims is None else sorted(set(dims) & set(knobs))
    return (
        tuple((name, canonical_value(knobs[name])) for name in names),
        tuple(sorted(set(patches))),
    )


def same_config(
    a: tuple[Mapping[str, object], Iterable[str]],
    b: tuple[Mapping[str, object], Iterable[str]],
    dims: Iterable[str] | None = None,
) -> bool:
    """Whether two (knobs, patches) pairs are one configuration (``config_key`` of each)."""
    names = None if dims is None else list(dims)
    return config_key(*a, dims=names) == config_key(*b, dims=names)


def changed_knobs(knobs: Mapping[str, object], baseline: Mapping[str, object]) -> dict[str, object]:
    """The knobs of ``knobs`` whose value differs from the baseline's (however spelled): what a
    configuration changes."""
    return {
        name: value
        for name, value in knobs.items()
        if name not in baseline or canonical_value(baseline[name]) != canonical_value(value)
    }


def describe_changes(
    knobs: Mapping[str, object], patches: Iterable[str], baseline: Mapping[str, object]
) -> str:
    """What a configuration changes from the baseline, for a person: ``micro_batch=4
    +sdpa_attention``, or ``baseline``."""
    parts = [f"{k}={v}" for k, v in sorted(changed_knobs(knobs, baseline).items())]
    parts += [f"+{p}" for p in sorted(patches)]
    return " ".join(parts) or "baseline"
