"""The benchmark's frozen rules (``bench/constants.json``): every constant of the search and of
the search benchmark, the tables each was chosen on, and which tables are therefore held out.

A table is *held out* when it is in no constant's ``chosen_on`` and not among ``tables_seen``
(the tables committed before the rules were frozen): it was measured after the commit that
froze the rules it judges. A table is *retired* (``tables_retired``, with the reason) when what
it measured was the host rather than the search: it replays, is reported, and takes no rank.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).parent
REGISTRY = BENCH / "constants.json"


def load(path: Path = REGISTRY) -> dict:
    """The registry as written."""
    return json.loads(Path(path).read_text())


def module_of(path: str) -> Any:
    """The module a registry entry names by its file (``src/infrarsi/run/x.py`` or
    ``bench/x.py``)."""
    if path.startswith("src/"):
        return importlib.import_module(path[len("src/") : -len(".py")].replace("/", "."))
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(Path(path).stem)


def current_value(entry: dict) -> Any:
    """What the code holds now for a registry entry, as JSON would hold it."""
    return json.loads(json.dumps(getattr(module_of(entry["module"]), entry["name"])))


def seen_tables(registry: dict | None = None) -> set[str]:
    """Every table a rule was chosen on or that existed before the freeze."""
    registry = registry or load()
    return set(registry["tables_seen"]).union(*(set(c["chosen_on"]) for c in registry["constants"]))


def retired(table: str, registry: dict | None = None) -> str | None:
    """Why ``table`` takes no rank any more (``tables_retired``: it measured the host, not
    the search), None while it counts. It still replays and is reported."""
    return (registry or load()).get("tables_retired", {}).get(table)


def held_out(table: str, registry: dict | None = None) -> bool:
    """Whether ``table`` judges rules that were frozen before it was measured."""
    return table not in seen_tables(registry)
