"""Numbers as people write them in instructions: ``25``, ``1,000``, ``2.5``, ``twenty-five``,
``a hundred and twenty``, ``一百``, ``两千零五``. Anything else is not a number (None): a reader
reports such a clause as not understood rather than guess.
"""

from __future__ import annotations

import re

_EN_UNITS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen".split()
    )
}
_EN_UNITS.update({"a": 1, "an": 1})
_EN_TENS = {
    w: 10 * i
    for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split())
    if i >= 2
}
_EN_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6}
_ZH_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000}
_DIGITS = re.compile(r"\d{1,3}(,\d{3})+(\.\d+)?|\d+(\.\d+)?")
ZH_NUMERAL = "零〇一二两三四五六七八九十百千万"


def parse_number(text: str) -> float | None:
    """The number ``text`` spells out entirely, or None."""
    text = text.strip().lower()
    if _DIGITS.fullmatch(text):
        return float(text.replace(",", ""))
    if text and all(ch in ZH_NUMERAL for ch in text):
        return _zh(text)
    return _en(text)


def _en(text: str) -> float | None:
    words = [w for w in re.split(r"[\s-]+", text) if w and w != "and"]
    if not words or text.endswith("and") or text.startswith("and"):
        return None
    total, current = 0, 0
    for i, word in enumerate(words):
        if word in ("a", "an") and i != 0:
            return None
        if word in _EN_UNITS:
            current += _EN_UNITS[word]
        elif word in _EN_TENS:
            current += _EN_TENS[word]
        elif word in _EN_SCALES:
            scale = _EN_SCALES[word]
            if scale == 100:
                current = (current or 1) * 100
            else:
                total += (current or 1) * scale
                current = 0
        else:
            return None
    return float(total + current)


def _zh(text: str) -> float | None:
    total, section, digit = 0, 0, None
    for ch in text:
        if ch in _ZH_DIGITS:
            if digit is not None and _ZH_DIGITS[ch] != 0:
                return None  # two digits in a row ("一二") is not a numeral
            digit = _ZH_DIGITS[ch] or None
        elif ch in _ZH_UNITS:
            section += (digit if digit is not None else 1) * _ZH_UNITS[ch]
            digit = None
        elif ch == "万":
            total += (section + (digit or 0)) * 10_000
            section, digit = 0, None
    return float(total + section + (digit or 0))
