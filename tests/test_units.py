import pytest

from infrarsi.units import format_bytes, parse_bytes


@pytest.mark.parametrize(
    "text, expected",
    [
        ("300MiB", 300 * 2**20),
        ("2 GiB", 2 * 2**30),
        ("16GB", 16 * 10**9),
        ("1.5KiB", 1536),
        ("4096", 4096),
        (123, 123),
    ],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["300M", "lots", "-1GiB", "1 GiB extra", ""])
def test_parse_bytes_refuses_ambiguous_or_bad_units(text):
    with pytest.raises(ValueError, match="MiB"):
        parse_bytes(text)


def test_format_bytes():
    assert format_bytes(300 * 2**20) == "300.0 MiB"
    assert format_bytes(None) == "-"
