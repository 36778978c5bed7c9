"""The search space: configurations (knob values plus a patch set) and their numeric encoding.

Every model of the Run stage reads configurations through one ``Space``: integer and float
knobs as ``log2(1 + value)``, booleans as 0/1, choices one-hot (the first level dropped), each
patch as 0/1. Columns are standardised on the space's own levels, so a ridge penalty means the
same for every knob.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import numpy as np

from infrarsi.identity import Configuration, KnobLevel, canonical_value

if TYPE_CHECKING:
    from infrarsi.workloads.manifest import Manifest

P = ParamSpec("P")
R = TypeVar("R")

# the search's name for a configuration: the ground floor's one type (``identity``)
Config = Configuration


@dataclass(frozen=True)
class Dim:
    """One knob as the models see it: ``num`` (log-scaled), ``bool`` or ``cat`` (one-hot)."""

    name: str
    kind: str
    levels: tuple[KnobLevel, ...]

    def width(self) -> int:
        """How many columns this knob takes."""
        return len(self.levels) - 1 if self.kind == "cat" else 1

    def encode(self, value: KnobLevel) -> list[float]:
        """The knob's columns for one value (unknown categorical levels encode as all zeros)."""
        if self.kind == "num":
            return [math.log2(1.0 + float(value))]
        if self.kind == "bool":
            return [1.0 if _truth(value) else 0.0]
        v = canonical_value(value)
        return [1.0 if v == canonical_value(level) else 0.0 for level in self.levels[1:]]


def _truth(value: KnobLevel) -> bool:
    return value if isinstance(value, bool) else str(value).lower() in ("true", "1", "yes")


def infer_dim(name: str, values: list[KnobLevel]) -> Dim:
    """A knob's kind from the values it takes (strings read from a CSV included); the levels
    keep the values' own representation, so a level can be put back into a config."""
    distinct = list(dict.fromkeys(values))
    if all(str(v).lower() in ("true", "false") for v in distinct):
        return Dim(name, "bool", tuple(sorted(distinct, key=_truth)))
    try:
        return Dim(name, "num", tuple(sorted(distinct, key=float)))
    except (TypeError, ValueError):
        return Dim(name, "cat", tuple(sorted(distinct, key=str)))


@dataclass
class Space:
    """The knobs and patches a search moves over, and how configs become model inputs."""

    dims: list[Dim]
    patches: list[str]
    _mean: np.ndarray = field(init=False, repr=False)
    _scale: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        raw = [col for d in self.dims for col in _level_columns(d)] + [
            np.array([0.0, 1.0]) for _ in self.patches
        ]
        self._mean = np.array([c.mean() for c in raw]) if raw else np.zeros(0)
        scale = np.array([c.std() for c in raw]) if raw else np.zeros(0)
        self._scale = np.where(scale > 0, scale, 1.0)

    @classmethod
    def from_levels(cls, levels: dict[str, list[KnobLevel]], patches: list[str]) -> Space:
        """A space over knobs whose kinds are inferred from the values they take."""
        return cls([infer_dim(n, v) for n, v in levels.items()], sorted(patches))

    @classmethod
    def from_manifest(
        cls, manifest: Manifest, levels: dict[str, list[KnobLevel]] | None = None
    ) -> Space:
        """A space over a manifest's knobs (``levels`` restricts their values) and its catalog."""
        dims = []
        for knob in manifest.knobs:
            values = (levels or {}).get(knob.name) or list(knob.values or [False, True])
            kind = {"int": "num", "float": "num", "bool": "bool"}.get(knob.type, "cat")
            dims.append(Dim(knob.name, kind, tuple(values)))
        return cls(dims, sorted(p.id for p in manifest.patches))

    @property
    def width(self) -> int:
        """Number of encoded columns."""
        return sum(d.width() for d in self.dims) + len(self.patches)

    def column_names(self) -> list[str]:
        """A name per encoded column (``precision=bf16``, ``+sdpa_attention``)."""
        out = []
        for d in self.dims:
            out += [d.name] if d.kind != "cat" else [f"{d.name}={lvl}" for lvl in d.levels[1:]]
        return out + [f"+{p}" for p in self.patches]

    def encode(self, configs: list[Config]) -> np.ndarray:
        """An (n, width) standardised matrix of the configs."""
        rows = np.zeros((len(configs), self.width))
        for i, config in enumerate(configs):
            knobs = config.knob_dict
            row = [c for d in self.dims for c in d.encode(knobs.get(d.name, d.levels[0]))]
            row += [1.0 if p in config.patches else 0.0 for p in self.patches]
            rows[i] = row
        encoded: np.ndarray = (rows - self._mean) / self._scale
        return encoded


def single_threaded(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` with one BLAS thread: the models' matrices are small, and a second thread
    only spins against the trial running beside the search (measured: 12 ms vs 300 ms a fit)."""
    import functools

    from threadpoolctl import threadpool_limits

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with threadpool_limits(1):
            return fn(*args, **kwargs)

    return wrapper


def _level_columns(dim: Dim) -> list[np.ndarray]:
    encoded = np.array([dim.encode(level) for level in dim.levels])
    return [encoded[:, j] for j in range(encoded.shape[1])]
