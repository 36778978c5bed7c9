"""The framework a script is written on, read from its source, and the evidence the harness
can take of what its trials learned: a Hugging Face ``Trainer`` job and an ``accelerate`` loop
save no parameters the harness can read, so the harness saves them itself through the framework
(``sandbox/_hooks/infrarsi_params.py``) and, for a Trainer job, has the unpatched script's own
Trainer evaluate them on its held-out set (``trial/evaluation/frameworks.py``)."""

from __future__ import annotations

import ast

TRAINERS = ("Trainer", "Seq2SeqTrainer", "SFTTrainer")
TRAINER_PACKAGES = ("transformers", "trl")


def framework_of(source: str) -> str | None:
    """``trainer`` (a ``transformers`` Trainer is made), ``accelerate`` (an ``Accelerator``
    is), else None; a script that does not parse is none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    imported = _imported_packages(tree)
    trainers = set(TRAINERS) | _subclasses(tree, set(TRAINERS))
    called = {_callee(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    if imported & set(TRAINER_PACKAGES) and called & trainers:
        return "trainer"
    if "accelerate" in imported and "Accelerator" in called:
        return "accelerate"
    return None


def passes_eval_dataset(source: str) -> bool:
    """Whether the script gives its Trainer a held-out set (``eval_dataset=``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(
        isinstance(n, ast.keyword) and n.arg == "eval_dataset" and not _is_none(n.value)
        for n in ast.walk(tree)
    )


LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning")


def lightning_validates(source: str) -> bool:
    """Whether the script is a PyTorch Lightning job whose ``Trainer.fit`` is given a
    validation loader (``val_dataloaders``, a third argument, or a ``val_dataloader`` the
    script defines) and whose ``validation_step`` logs (``self.log``): its held-out loss is then
    what the unpatched script's ``Trainer.validate`` returns."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    if not _imported_packages(tree) & set(LIGHTNING_PACKAGES):
        return False
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    defined = {n.name for n in functions}
    fits = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _callee(n.func) == "fit"]
    given = any(
        len(c.args) >= 3 or any(k.arg == "val_dataloaders" for k in c.keywords) for c in fits
    )
    logs = any(  # what Trainer.validate returns is what validation_step logs
        isinstance(n, ast.Call) and _callee(n.func) in ("log", "log_dict")
        for f in functions
        if f.name == "validation_step"
        for n in ast.walk(f)
    )
    return bool(fits) and logs and (given or "val_dataloader" in defined)


def evaluation(framework: str, launch: list[str], script: str, has_eval: bool):
    """(the manifest's ``evaluation``, what the draft's notes say is checked). ``launch``: the
    baseline's rendered command, whose script and arguments a Trainer's evaluation runs."""
    if framework == "trainer":
        command = own_command(launch, script)
        where = (
            "its eval_dataset"
            if has_eval
            else "its training data (the script gives the Trainer no eval_dataset: give it one "
            "for a held-out check)"
        )
        return {"framework": "trainer", "command": command}, (
            "evidence: the harness saves the parameters before and after Trainer.train in every "
            "trial and compares them with the baseline's; the unpatched script's Trainer "
            f"evaluates them on {where} at the baseline's arguments"
        )
    return {"framework": "accelerate"}, (
        "evidence: the harness saves the model given to Accelerator.prepare (at prepare and at "
        "exit) in every trial and compares it with the baseline's; no held-out loss is checked "
        '(a custom loop: add evaluation.command, a script that prints {"eval_loss": ...} for '
        "{weights})"
    )


def own_command(launch: list[str], script: str) -> list[str]:
    """``python SCRIPT ARGS`` of a rendered ``launch`` (whatever launcher ran the script),
    escaped as a manifest's evaluation command is formatted."""
    own = launch[launch.index(script) :]
    return ["python", *(w.replace("{", "{{").replace("}", "}}") for w in own)]


def _imported_packages(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _subclasses(tree: ast.AST, bases: set[str]) -> set[str]:
    """Classes the script defines on one of ``bases`` (a Trainer of its own)."""
    return {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ClassDef) and any(_callee(b) in bases for b in n.bases)
    }


def _callee(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _is_none(value: ast.expr) -> bool:
    return isinstance(value, ast.Constant) and value.value is None
