"""What a training script accepts, read from its source without running it: ``argparse``
arguments (``add_argument`` calls with literal options), ``click`` options (``@click.option``
with literal names), and nanoGPT-style configurator globals (module-level literal assignments a
``--key=value`` overrides)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

TYPES = {"int": "int", "float": "float", "str": "str", "bool": "bool"}


@dataclass(frozen=True)
class ScriptArg:
    """One argument of a script: its destination name, its option strings, its type (int,
    float, str, bool or None when unknown), its default, the choices it declares, and whether
    it is a switch (``store_true``/``store_false``: present or absent)."""

    dest: str
    options: tuple[str, ...]
    type: str | None
    default: Any = None
    choices: tuple[Any, ...] = ()
    switch: bool = False
    help: str = ""
    named: str | None = None  # the role the user named for it (``--role``): taken as given


def read_arguments(source: str) -> list[ScriptArg]:
    """Every argument the script declares: its argparse arguments, the fields of its own
    dataclasses and of Hugging Face's ``TrainingArguments`` when it parses them with
    ``HfArgumentParser``, else (a nanoGPT-style script that ``exec``s a configurator) its
    module-level literal globals."""
    tree = ast.parse(source)
    found = [a for a in (_argparse(node) for node in ast.walk(tree)) if a is not None]
    if "click" in source:
        found += [a for a in (_click(node) for node in ast.walk(tree)) if a is not None]
    if "HfArgumentParser" in source:
        found += _dataclass_fields(tree)
        if "TrainingArguments" in source:
            known = {a.dest for a in found}
            found += [a for a in TRAINING_ARGUMENTS if a.dest not in known]
    if found:
        return found
    if "configurator" in source:
        return _globals(tree)
    return []


def _hf(name: str, kind: str, default: Any, choices: tuple = ()) -> ScriptArg:
    """One of ``TrainingArguments``' fields as HfArgumentParser exposes it (a bool that
    defaults to False is a switch: ``--bf16``)."""
    switch = kind == "bool" and default is False
    return ScriptArg(name, (f"--{name}",), kind, default, choices, switch)


# the fields of transformers.TrainingArguments a search may tune or must set (their defaults)
TRAINING_ARGUMENTS = (
    _hf("per_device_train_batch_size", "int", 8),
    _hf("gradient_accumulation_steps", "int", 1),
    _hf("bf16", "bool", False),
    _hf("fp16", "bool", False),
    _hf("torch_compile", "bool", False),
    _hf("gradient_checkpointing", "bool", False),
    _hf("dataloader_num_workers", "int", 0),
    # the implementations of the default algorithm (another algorithm trains another model)
    _hf("optim", "str", "adamw_torch", ("adamw_torch", "adamw_torch_fused")),
    _hf("max_steps", "int", -1),
    _hf("seed", "int", 42),
    _hf("logging_steps", "int", 500),
)


def _dataclass_fields(tree: ast.Module) -> list[ScriptArg]:
    """The annotated fields of the script's own ``@dataclass`` classes (what
    HfArgumentParser turns into ``--field`` options), with literal defaults."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef) or not any(
            "dataclass" in ast.unparse(d) for d in node.decorator_list
        ):
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                default = _field_default(item.value)
                kind = _annotation_kind(item.annotation) or _kind_of(default)
                name = item.target.id
                switch = kind == "bool" and default is False
                out.append(ScriptArg(name, (f"--{name}",), kind, default, (), switch))
    return out


def _field_default(node: ast.AST | None) -> Any:
    """A field's default: a literal, or ``field(default=...)``'s."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "field":
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        return _literal(kw.get("default"))
    return _literal(node)


def _annotation_kind(node: ast.AST) -> str | None:
    text = ast.unparse(node)
    for kind in ("bool", "int", "float", "str"):
        if re.search(rf"\b{kind}\b", text):
            return kind
    return None


def _argparse(node: ast.AST) -> ScriptArg | None:
    """A ``*.add_argument("--x", ...)`` call as a ScriptArg (None for anything else)."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "add_argument"
    ):
        return None
    options: tuple[str, ...] = tuple(
        a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
    )
    if not options:
        return None
    kw = {k.arg: k.value for k in node.keywords if k.arg}
    action = _literal(kw.get("action"))
    long = [o for o in options if o.startswith("--")] or list(options)
    dest = _literal(kw.get("dest")) or long[0].lstrip("-").replace("-", "_")
    switch = action in ("store_true", "store_false")
    default = _literal(kw.get("default"))
    if switch and default is None:
        default = action == "store_false"
    kind = "bool" if switch else _type(kw.get("type"), default)
    choices = _literal(kw.get("choices"))
    return ScriptArg(
        dest=str(dest),
        options=options,
        type=kind,
        default=default,
        choices=tuple(choices) if isinstance(choices, list | tuple) else (),
        switch=switch,
        help=str(_literal(kw.get("help")) or ""),
    )


def _click(node: ast.AST) -> ScriptArg | None:
    """A ``click.option("--x", ...)`` call as a ScriptArg (None for anything else): its name
    is the one given without dashes, else its longest option's (click's rule)."""
    if not (isinstance(node, ast.Call) and _callee_name(node.func) == "option"):
        return None
    names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    options = tuple(o.split("/")[0] for o in names if o.startswith("-"))
    if not options:
        return None
    kw = {k.arg: k.value for k in node.keywords if k.arg}
    bare = [n for n in names if not n.startswith("-")]
    dest = bare[0] if bare else max(options, key=len).lstrip("-").replace("-", "_")
    switch = _literal(kw.get("is_flag")) is True
    default = _literal(kw.get("default"))
    if switch and default is None:
        default = False
    choices = kw.get("type")
    listed = _literal(choices.args[0]) if isinstance(choices, ast.Call) and choices.args else None
    return ScriptArg(
        dest=dest,
        options=options,
        type="bool" if switch else _type(None if listed else choices, default),
        default=default,
        choices=tuple(listed) if isinstance(listed, list | tuple) else (),
        switch=switch,
        help=str(_literal(kw.get("help")) or ""),
    )


def _callee_name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _type(node: ast.AST | None, default: Any) -> str | None:
    """An argument's type: its ``type=`` (int, float, str), else its default's."""
    if isinstance(node, ast.Name) and node.id in TYPES:
        return TYPES[node.id]
    if node is None and default is not None:
        return _kind_of(default)
    return None if node is not None else "str"


def _kind_of(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return None


def _literal(node: ast.AST | None) -> Any:
    """A node's literal value (None when it is not a literal)."""
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def _globals(tree: ast.Module) -> list[ScriptArg]:
    """Module-level ``name = literal`` assignments before the configurator is run: the
    settings ``--name=value`` overrides (nanoGPT's ``configurator.py``)."""
    out = []
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            value = _literal(node.value)
            kind = _kind_of(value)
            name = node.targets[0].id
            if kind is not None and not name.startswith("_"):
                out.append(ScriptArg(name, (f"--{name}",), kind, value, (), False))
        if _runs_configurator(node):
            break
    return out


def _runs_configurator(node: ast.stmt) -> bool:
    """A statement that calls something naming the configurator (``exec(open(...).read())``),
    not a docstring or a string that mentions it."""
    call = node.value if isinstance(node, ast.Expr) else None
    return isinstance(call, ast.Call) and "configurator" in ast.unparse(call)
