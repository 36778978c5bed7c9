"""A patch's mapping to the reference layout, checked to be a mapping and applied by the harness.

A patch that re-lays-out parameters (fuses the key, query and value projections, say) defines
``to_reference_params(params) -> params`` so that the unpatched reference code can judge what it
learned. That is the patch's own code, run on the evidence: given the trained parameters, it
could return anything (a stored result, an update added back). So it is never given them. The
harness makes tensors with the saved parameters' names and shapes whose every element is a
code drawn now (``coded``: element ``k`` holds ``k + u_k``, ``u_k`` uniform in [0.25, 0.75), in
float64), the mapping runs on those, and each element of its output must be one of the codes
(``index_map``): a re-indexing — split, fused, transposed, reshaped, duplicated (tied
parameters), dropped — of its input and nothing else. The harness then applies that index map
to the saved parameters itself (``apply``). Any arithmetic, any value read from elsewhere, any
change of precision gives values that are not codes, and the mapping is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch


class NotAMapping(RuntimeError):
    """The patch's ``to_reference_params`` did more than re-index its input."""


@dataclass(frozen=True)
class Coded:
    """The coded stand-in of one saved parameter set: name -> float64 tensor of codes (its
    elements numbered in the saved set's order), and every code by element number."""

    tensors: dict[str, torch.Tensor]
    table: torch.Tensor


# Modules PyTorch wraps around a module, holding the very same parameters one name deeper:
# ``torch.compile``'s OptimizedModule, the activation-checkpoint and FSDP wrappers.
WRAPPERS = frozenset({"_orig_mod", "_checkpoint_wrapped_module", "_fsdp_wrapped_module"})


def unwrapped(name: str) -> str:
    """A parameter's name without the wrappers' segments (a compiled submodule's parameters
    are its module's)."""
    return ".".join(part for part in name.split(".") if part not in WRAPPERS)


def load_saved(path: Path, key: str = "") -> dict[str, torch.Tensor]:
    """The parameters a trial saved (under ``key`` in a checkpoint that holds more), each
    under its unwrapped name."""
    saved = torch.load(path, map_location="cpu", weights_only=True)
    params = saved[key] if key else saved
    bad = [name for name, value in params.items() if not isinstance(value, torch.Tensor)]
    if bad:
        raise NotAMapping(f"the saved parameters hold values that are not tensors: {bad[:6]}")
    out: dict[str, torch.Tensor] = {}
    for name, value in params.items():
        out.setdefault(unwrapped(name), value)
    return out


def coded(params: dict[str, torch.Tensor], generator: torch.Generator | None = None) -> Coded:
    """Tensors shaped as ``params``, every element a code drawn now."""
    total = sum(p.numel() for p in params.values())
    offsets = torch.rand(total, dtype=torch.float64, generator=generator) * 0.5 + 0.25
    table = torch.arange(total, dtype=torch.float64) + offsets
    tensors, start = {}, 0
    for name, param in params.items():
        n = param.numel()
        tensors[name] = table[start : start + n].reshape(param.shape).clone()
        start += n
    return Coded(tensors, table)


def index_map(codes: Coded, mapped: object) -> dict[str, torch.Tensor]:
    """Output name -> the element numbers each of its elements took; NotAMapping naming the
    first output that is not a re-indexing of the codes."""
    if not isinstance(mapped, dict):
        raise NotAMapping(
            f"to_reference_params returned {type(mapped).__name__}, not a dict of tensors"
        )
    index = {}
    for name, value in mapped.items():
        if not isinstance(value, torch.Tensor) or value.dtype != torch.float64:
            raise NotAMapping(
                f"to_reference_params is not a re-indexing of its input: it gave {name!r} as "
                f"{getattr(value, 'dtype', type(value).__name__)} (a mapping to the reference "
                "layout moves elements and keeps their values)"
            )
        number = value.floor()
        inside = (number >= 0) & (number < codes.table.numel())
        ok = inside.clone()
        ok[inside] = codes.table[number[inside].long()] == value[inside]
        if not bool(ok.all()):
            raise NotAMapping(
                f"to_reference_params is not a re-indexing of its input: {int((~ok).sum())} "
                f"element(s) of {name!r} hold values its input does not (it computes, or "
                "reads them from elsewhere)"
            )
        index[str(name)] = number.long()
    return index


def apply(
    params: dict[str, torch.Tensor], index: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The saved parameters re-indexed as the mapping re-indexed their codes (numbered in the
    order of ``params``, as ``coded`` numbers them)."""
    if not params:
        return {}
    flat = torch.cat([p.detach().reshape(-1) for p in params.values()])
    starts = torch.tensor([0] + [p.numel() for p in params.values()]).cumsum(0)[1:]
    dtypes = [p.dtype for p in params.values()]
    out = {}
    for name, numbers in index.items():
        picked = flat[numbers.reshape(-1)].reshape(numbers.shape).clone()
        if numbers.numel():  # a set of mixed precisions: each output keeps its source's
            source = int(torch.searchsorted(starts, numbers.reshape(-1)[0], right=True))
            picked = picked.to(dtypes[source])
        out[name] = picked
    return out
