"""The one-way rules of ARCHITECTURE.md, checked on the source: no import cycle, screens only in
``cli``, stages that talk through records and the store (never import one another), and a
ground floor (``trial``, ``workloads``, the probe) that knows no stage, store or screen."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
STAGES = ("init", "doctor", "run", "apply", "report", "bank", "proposers")
SCREENS = ("rich", "typer")


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / "infrarsi").rglob("*.py"):
        rel = path.relative_to(SRC)
        if {"reference", "_hooks"} & set(rel.parts):  # workloads and the ranks' hooks
            continue
        parts = list(rel.with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (functions and TYPE_CHECKING blocks too):
    ``from a import b`` counts ``a.b`` where that is a module, else ``a``."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {
                f"{node.module}.{a.name}"
                for a in node.names
                if f"{node.module}.{a.name}" in MODULES
            }
            out |= subs
            if len(subs) < len(node.names):
                out.add(node.module)
    return out


GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _cycles() -> list[list[str]]:
    graph = {m: {i for i in imps if i in MODULES and i != m} for m, imps in GRAPH.items()}
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_rules_see_the_whole_package():
    assert {
        "infrarsi.cli",
        "infrarsi.trial.runner",
        "infrarsi.verify",
        "infrarsi.run.loop",
        "infrarsi.doctor.run",
    } <= set(MODULES)


def test_no_import_cycle():
    assert _cycles() == []


def test_only_the_screens_import_rich_or_typer():
    offenders = {
        m: sorted(i for i in imps if i.split(".")[0] in SCREENS)
        for m, imps in GRAPH.items()
        if _room(m) != "cli"
    }
    assert {m: i for m, i in offenders.items() if i} == {}


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_imports_no_other_stage(stage):
    own = [m for m in MODULES if _room(m) == stage]
    crossing = {
        m: sorted(
            i
            for i in GRAPH[m]
            if i.startswith("infrarsi.") and _room(i) in STAGES and _room(i) != stage
        )
        for m in own
    }
    assert {m: i for m, i in crossing.items() if i} == {}


def test_the_ground_floor_knows_no_stage_store_or_screen():
    upper = set(STAGES) | {"store", "executors", "cli", "optimize", "verify", "draft"}
    ground = [
        m
        for m in MODULES
        if _room(m)
        in (
            "trial",
            "workloads",
            "sandbox",
            "probe",
            "units",
            "host",
            "identity",
            "stages",
            "enums",
        )
    ]
    climbing = {
        m: sorted(i for i in GRAPH[m] if i.startswith("infrarsi.") and _room(i) in upper)
        for m in ground
    }
    assert {m: i for m, i in climbing.items() if i} == {}


def test_the_benchmarks_import_one_another_without_a_cycle():
    bench = Path(__file__).resolve().parent.parent / "bench"
    names = {p.stem for p in bench.glob("*.py")}
    graph = {}
    for path in bench.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in names}
            elif isinstance(node, ast.ImportFrom) and node.module in names:
                found.add(node.module)
        graph[path.stem] = found - {path.stem}

    def reaches(start, goal, seen=()):
        return any(
            n == goal or (n not in seen and reaches(n, goal, (*seen, n))) for n in graph[start]
        )

    assert [m for m in graph if reaches(m, m)] == []


KNOB_HOLDERS = ("knobs", "knob_dict", "config_json", "config")


def _holder(node: ast.AST) -> bool:
    """A knob mapping or a config's JSON: ``x.knobs``, ``knobs``, ``t.config_json``, a row's
    ``t["knobs"]``, or one of their values read by ``.get(...)`` / ``[...]``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "get":
            return _holder(node.func.value)
    if isinstance(node, ast.Subscript):
        key = node.slice.value if isinstance(node.slice, ast.Constant) else None
        return key in KNOB_HOLDERS or _holder(node.value)  # row["knobs"], or knobs[name]
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name in KNOB_HOLDERS or name.endswith("_knobs")


def _str_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and getattr(node.func, "id", "") == "str"


def _raw_comparisons(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            continue
        if not isinstance(node.ops[0], ast.Eq | ast.NotEq):
            continue
        left, right = node.left, node.comparators[0]
        if isinstance(left, ast.Constant) or isinstance(right, ast.Constant):
            continue  # one knob against a literal: not two configurations compared
        if (_holder(left) and _holder(right)) or (_str_call(left) and _str_call(right)):
            where = path.relative_to(SRC) if path.is_relative_to(SRC) else path.name
            found.append(f"{where}:{node.lineno}")
    return found


def test_configurations_are_compared_by_one_rule():
    """Two configurations, or two knob values, are the same by ``identity.config_key`` (and
    ``canonical_value``, ``changed_knobs``, ``differing_knobs``, ``Configuration``): never by a
    dict's, a list's or a JSON text's ``==``, nor by ``str(a) != str(b)`` (``2`` and ``2.0``
    differ there; they once picked the noise floors verification applies)."""
    raw = [hit for path in MODULES.values() for hit in _raw_comparisons(path)]
    assert raw == [], raw


def test_the_raw_comparison_check_sees_what_it_forbids(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(a, b, c, d):\n"
        "    x = a.knobs == b.knobs\n"
        "    y = a.knobs.get('n') != b.knobs.get('n')\n"
        "    z = c.config_json == d.config_json\n"
        "    w = str(a) != str(b)\n"
        "    v = c['knobs'] == d['knobs']\n"
        "    ok = a.knobs.get('precision') == 'bf16'\n"
        "    return x, y, z, w, v, ok\n"
    )
    assert _raw_comparisons(sample) == [f"sample.py:{n}" for n in (2, 3, 4, 5, 6)]


def _reaching(rooms: tuple[str, ...], into: tuple[str, ...]) -> dict[str, list[str]]:
    """Modules of ``rooms`` that import a module of ``into``."""
    return {
        m: sorted(i for i in GRAPH[m] if i.startswith("infrarsi.") and _room(i) in into)
        for m in MODULES
        if _room(m) in rooms
        and any(i.startswith("infrarsi.") and _room(i) in into for i in GRAPH[m])
    }


def test_no_arrow_runs_up_from_the_sandbox_or_the_workloads():
    """The sandbox (processes, ownership, memory, remote launchers, hooks) sits below every
    room that launches a process and knows none of them; the workloads know no trial (the
    drafter, which runs a dry run through the trial's channel, is a room above both)."""
    assert _reaching(("sandbox",), ("trial", "workloads", "draft")) == {}
    assert _reaching(("workloads",), ("trial", "sandbox", "draft")) == {}
    assert _reaching(("trial",), ("draft",)) == {}


def test_no_function_is_longer_than_a_reader_can_hold():
    """At most 60 lines a function, docstring included (ruff's C901 and PLR0915 bound its
    branches and statements; this bounds what a reader scrolls)."""
    long = [
        f"{name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > 60
    ]
    assert long == [], long


def test_the_audit_is_the_composers_listener_and_no_stage_subscribes_it():
    """Who hears a run's store is decided where the run is composed (``optimize``, ``compose``
    and the commands run by hand): the search and Apply take a ledger and subscribe no one."""
    hearing = {
        m for m, imports in GRAPH.items() if "infrarsi.audit" in imports and _room(m) in STAGES
    }
    assert hearing == set()
