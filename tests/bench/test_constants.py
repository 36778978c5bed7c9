"""The frozen rules' registry (``bench/constants.json``) says what the code holds: every value
listed equals the code's, every module-level number of the search and of the benchmark's rules
is listed, and a table the registry has not seen is held out."""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import rules  # noqa: E402

MODULES = [
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "src/infrarsi/run").glob("*.py")),
    "bench/gate.py",
    "bench/replay.py",
    "bench/scoring.py",
    "bench/smac_peer.py",
]
NOT_RULES = {  # names, not numbers a table could tune: what a search is, or a loop's plumbing
    "RANKED",
    "POLL_S",
    "PROPOSE_EVERY",
    "MAX_RANDOM",
    "LOG_2PI",
    "N_BOOT",
}


def numeric_constants(path: Path) -> set[str]:
    """Module-level UPPER_CASE names bound to a number or a tuple of numbers."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name) and target.id.isupper():
                try:
                    literal = ast.literal_eval(value)
                except ValueError:  # math.log(1.10) and the like are numbers too
                    literal = 0.0 if _math_call(value) else None
                numbers = literal if isinstance(literal, tuple) else (literal,)
                if numbers and all(
                    isinstance(v, int | float) and not isinstance(v, bool) for v in numbers
                ):
                    out.add(target.id)
    return out


def _math_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "math"
    )


def test_every_listed_value_is_the_codes():
    for entry in rules.load()["constants"]:
        assert rules.current_value(entry) == entry["value"], (entry["module"], entry["name"])


def test_every_number_of_the_search_and_of_the_rules_is_listed():
    listed = {(c["module"], c["name"]) for c in rules.load()["constants"]}
    missing = [
        (m, n)
        for m in MODULES
        for n in numeric_constants(ROOT / m) - NOT_RULES
        if (m, n) not in listed
    ]
    assert not missing, (
        f"add them to bench/constants.json with the tables they were chosen on: {missing}"
    )


def test_a_table_the_registry_has_not_seen_is_held_out():
    registry = rules.load()
    assert not rules.held_out(registry["tables_seen"][0], registry)
    assert rules.held_out("dense-1node-wide-0123456789abcdef", registry)


def test_a_retired_table_says_why_and_takes_no_rank():
    """A table that measured the host rather than the search replays and is reported, and
    takes no rank (``tables_retired``)."""
    import searchers as bench

    registry = rules.load()
    for name, why in registry.get("tables_retired", {}).items():
        assert rules.retired(name, registry) == why and len(why) > 40
    assert rules.retired("dense-1node-wide-0123456789abcdef", registry) is None
    (name,) = list(registry["tables_retired"])[:1]

    def row(area: float) -> dict:
        return {
            "trials_to_target_median": 1,
            "cost_to_target_s_median": 1,
            "per_seed": {"area": [area, area]},
        }

    counted = {"informative": True, "design": "full_factorial", "truth_split": True}
    entry = {"infrarsi": row(0.9), "greedy": row(0.1), **counted}
    assert bench.overall({name: entry})["average_rank"] == {}
    assert bench.overall({"kept": entry})["average_rank"]["greedy"] == 1.0
