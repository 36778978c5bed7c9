"""The minimum versions in pyproject.toml are the ones the code needs: an API the code calls
that appeared in a later release than the pin makes this fail (so a lower pin fails CI)."""

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
# package -> (the release that first has what the code calls, what that is, where it is called)
NEEDS = {
    "optuna": ("5.0", "Trial.set_constraint", "src/infrarsi/run/optuna_peers.py"),
    "pydantic": (
        "2.6",
        "ConfigDict(frozen=True), model_copy, model_dump(mode='json')",
        "src/infrarsi/contract.py",
    ),
    "SQLAlchemy": ("2.0", "DeclarativeBase, Mapped", "src/infrarsi/store/schema.py"),
}


def _pins() -> dict[str, str]:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    return {
        m.group(1): m.group(2) for d in deps if (m := re.match(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", d))
    }


def _tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


@pytest.mark.parametrize("package", sorted(NEEDS))
def test_the_pin_admits_no_release_without_what_the_code_calls(package):
    needed, api, where = NEEDS[package]
    assert (
        api.split("(")[0].split(",")[0].split(".")[-1] in (PYPROJECT.parent / where).read_text()
    ), f"{where} no longer calls {api}: update NEEDS"
    assert _tuple(_pins()[package]) >= _tuple(needed), (
        f"pyproject pins {package}>={_pins()[package]}, but {api} needs {needed}"
    )


def test_what_is_installed_satisfies_every_pin():
    for package, minimum in _pins().items():
        assert _tuple(version(package)) >= _tuple(minimum), (package, version(package))
