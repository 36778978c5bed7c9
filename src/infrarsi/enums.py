"""``ValueEnum``: the base of the tool's named values (stages, statuses, roles). A ground-floor
module: it reads nothing of the tool's."""

from __future__ import annotations

import enum


class ValueEnum(str, enum.Enum):
    """An enum of strings that reads as its value: ``str()``, f-strings and tables show
    ``ok``, not ``TrialStatus.OK``; equal to its value (``TrialStatus.OK == "ok"``), so what
    is stored or sent as text compares and validates as the member."""

    def __str__(self) -> str:
        return str(self.value)
