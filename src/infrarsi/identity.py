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
from dataclasses import dataclass, field

ConfigKey = tuple[tuple[tuple[str, str], ...], tuple[str, ...]]
KnobLevel = int | float | str | bool


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


def differing_knobs(
    a: Mapping[str, object], b: Mapping[str, object], names: Iterable[str] | None = None
) -> set[str]:
    """The knobs (of ``names``, else of either) whose values differ however spelled; a knob one
    side sets and the other leaves out differs."""
    wanted = set(a) | set(b) if names is None else set(names)
    return {
        n
        for n in wanted
        if (n in a) != (n in b) or (n in a and canonical_value(a[n]) != canonical_value(b[n]))
    }


@dataclass(frozen=True, eq=False)
class Configuration:
    """One configuration: every knob's value and the set of patches applied. Two are equal,
    and hash alike, when ``config_key`` says so (``2`` and ``2.0`` alike): the one type every
    stage compares configurations by."""

    knobs: tuple[tuple[str, KnobLevel], ...]
    patches: frozenset[str] = frozenset()
    key: ConfigKey = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", config_key(dict(self.knobs), self.patches))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Configuration) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    @classmethod
    def of(cls, knobs: Mapping[str, KnobLevel], patches: Iterable[str] = ()) -> Configuration:
        """A configuration from a knob mapping and an iterable of patch ids."""
        return cls(tuple(sorted(knobs.items())), frozenset(patches))

    @property
    def knob_dict(self) -> dict[str, KnobLevel]:
        """The knob values as a dict."""
        return dict(self.knobs)

    def changed_from(self, baseline: Mapping[str, object]) -> dict[str, object]:
        """The knobs whose value differs from ``baseline``'s (however spelled)."""
        return changed_knobs(self.knob_dict, baseline)

    def same_knobs(self, other: Configuration) -> bool:
        """Whether ``other`` sets the same knob values (its patches aside)."""
        return self.key[0] == other.key[0]

    def describe_from(self, baseline: Configuration) -> str:
        """What this configuration changes from ``baseline``, for a person: ``micro_batch=4
        +sdpa_attention``, or ``baseline`` (``describe_changes``)."""
        return describe_changes(self.knob_dict, self.patches, baseline.knob_dict)

    def describe(self) -> str:
        """``micro_batch=4 precision=bf16 +sdpa_attention``: for tables and logs."""
        knobs = " ".join(f"{k}={v}" for k, v in self.knobs)
        return " ".join(filter(None, [knobs, " ".join(f"+{p}" for p in sorted(self.patches))]))
