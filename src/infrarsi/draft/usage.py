"""Roles read from how a script uses its arguments, whatever they are called: the value it
passes to ``Accelerator(gradient_accumulation_steps=...)`` is the accumulation, the one it
passes to a ``DataLoader``'s ``batch_size`` the micro-batch, the one ``torch.set_num_threads``
takes the thread count. Read from the source (its syntax tree), never by running it."""

from __future__ import annotations

import ast

# (the called function's own name, the keyword — or the position — the value is passed as)
# -> the role that value plays
USES: dict[tuple[str, str | int], str] = {
    ("Accelerator", "gradient_accumulation_steps"): "grad_accum",
    ("Accelerator", "mixed_precision"): "precision",
    ("TrainingArguments", "gradient_accumulation_steps"): "grad_accum",
    ("TrainingArguments", "per_device_train_batch_size"): "micro_batch",
    ("DataLoader", "batch_size"): "micro_batch",
    ("DataLoader", "num_workers"): "data",
    ("set_num_threads", 0): "threads",
    # PyTorch Lightning's Trainer (``L.Trainer(...)``)
    ("Trainer", "accumulate_grad_batches"): "grad_accum",
    ("Trainer", "precision"): "precision",
    ("Trainer", "devices"): "ranks",  # the ranks Lightning starts itself: said, not searched
    ("Trainer", "num_nodes"): "ranks",
    # not knobs: the step count and the seed, read as the scale's parameters
    ("Trainer", "max_steps"): "steps",
    ("TrainingArguments", "max_steps"): "steps",
    ("manual_seed", 0): "seed",
    ("seed_everything", 0): "seed",
    ("set_seed", 0): "seed",
}
PARAMETERS = ("steps", "seed")  # the roles above that are scale parameters, not knobs


def roles_by_use(source: str, names: set[str]) -> dict[str, tuple[str, str]]:
    """Each of ``names`` (an argument's destination: ``args.accum``, or a global ``accum``)
    that the script passes where a role is read, as ``{name: (role, how)}``; the first use
    of a name counts. A script that does not parse gives nothing."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    found: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = _name(node.func)
        passed: list[tuple[str | int, ast.expr]] = [
            (k.arg, k.value) for k in node.keywords if k.arg
        ]
        passed += list(enumerate(node.args))
        for where, value in passed:
            role = USES.get((callee, where))
            name = _argument(value)
            if role is not None and name in names and name not in found:
                shown = f"{where}=" if isinstance(where, str) else ""
                found[name] = (role, f"passed to {callee}({shown}...)")
    return found


def _name(func: ast.expr) -> str:
    """``Accelerator`` of ``Accelerator(...)`` and of ``accelerate.Accelerator(...)``."""
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _argument(value: ast.expr) -> str | None:
    """The argument a value reads: ``args.accum`` -> ``accum``, a global ``accum`` -> itself."""
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
        return value.attr
    return value.id if isinstance(value, ast.Name) else None
