"""The kinds of change a candidate's knobs can make to the baseline, in one registry.

A candidate is judged by the kinds of change it makes (another split of the global batch,
another rank count, another precision): each kind is named once here, with one row that says
everything the rest of the tool reads of it — which knob roles make it (``knobs.change_kinds``),
which knob stands for it where no manifest can be read (``verify``), whether its printed loss
may be another sample of the same training (the Doctor's loss floor, ``doctor.calibrate``),
the precision its weight and held-out floors are judged at, and which of the calibration's
multiples scales its floor (``Equivalence.multiple``). A new kind of change is one member and
one row; ``contract.CHANGE_KINDS`` lists the members.
"""

from __future__ import annotations

from dataclasses import dataclass

from infrarsi.enums import ValueEnum

__all__ = ["KINDS", "ChangeKind", "KindRow"]


class ChangeKind(ValueEnum):
    """A kind of change a candidate's knobs make to the baseline's."""

    SPLIT = "split"  # another split of the same global batch (micro-batch, accumulation)
    RANKS = "ranks"  # another number of ranks sharing the global batch
    PRECISION = "precision"  # another compute precision


@dataclass(frozen=True)
class KindRow:
    """What the tool reads of one kind of change."""

    roles: tuple[str, ...]  # knob roles whose other value makes this kind
    fallback_knob: str  # the knob name that stands for it where no manifest can be read
    sampled: bool  # its printed loss may be another sample of the same training
    precision: str  # the precision its weight and held-out floors are judged at
    multiple: str  # the key of ``Equivalence.multiple`` that scales its calibrated floor


KINDS: dict[ChangeKind, KindRow] = {
    ChangeKind.SPLIT: KindRow(("micro_batch", "grad_accum"), "micro_batch", True, "fp32", "kind"),
    ChangeKind.RANKS: KindRow(("ranks",), "nproc", True, "fp32", "kind"),
    ChangeKind.PRECISION: KindRow(("precision",), "precision", False, "bf16", "bf16"),
}
