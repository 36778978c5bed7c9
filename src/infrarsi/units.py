"""Strict parsing and printing of sizes and durations, so every figure keeps its unit."""

from __future__ import annotations

import re

from infrarsi.errors import InfraRSIError

_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str | int) -> int:
    """``"300MiB"`` -> 314572800. Decimal (kB, MB, GB) and binary (KiB, MiB, GiB) units, or none.

    Raises ValueError naming the accepted units for anything else (``"300M"`` is ambiguous and
    refused).
    """
    if isinstance(text, int):
        return text
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _BYTE_UNITS:
        raise InfraRSIError(
            f"{text!r} is not a size: write a number with B, kB, MB, GB, KiB, MiB "
            "or GiB (e.g. 300MiB, 2GiB, 16GB)"
        )
    return int(float(match.group(1)) * _BYTE_UNITS[unit])


def format_bytes(n: int | float | None) -> str:
    """Bytes as a short binary size: 314572800 -> '300.0 MiB'."""
    if n is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


# a ratio bound past these is shown as past them: an interval over a few noisy rounds can
# reach 10^11, a number no measurement made and no reader should be shown as a result
RATIO_SHOWN = (0.01, 100.0)


def format_ratio_bound(value: float | None) -> str:
    """A speed-up or an interval's bound for people: three decimals within
    ``RATIO_SHOWN``, ``<0.01`` / ``>100`` past it, ``-`` when unknown."""
    if value is None:
        return "-"
    low, high = RATIO_SHOWN
    if value < low:
        return f"<{low:g}"
    if value > high:
        return f">{high:g}"
    return f"{value:.3f}"
