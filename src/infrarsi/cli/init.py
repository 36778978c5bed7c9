"""``infrarsi init``: read the instruction, show the contract, ask, freeze it to a file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from infrarsi.cli.errors import user_error
from infrarsi.contract import Contract
from infrarsi.errors import InfraRSIError
from infrarsi.init import InitError, init
from infrarsi.units import format_bytes
from infrarsi.workloads import find


def contract_json(contract: Contract) -> dict:
    """The contract as ``init --json`` prints it: the stable summary keys, then everything."""
    return {
        "workload": contract.workload,
        "scale": contract.scale,
        "objective": contract.objective,
        "loss_tolerance": contract.correctness.loss_tolerance,
        "mem_cap_bytes": contract.mem_cap_bytes,
        "budget_trials": contract.budget.trials,
        "budget_wall_time_s": contract.budget.wall_time_s,
        "locked": sorted(contract.locked),
        "editable": contract.editable,
        "not_understood": contract.not_understood,
        "contract_hash": contract.contract_hash,
        "contract": contract.model_dump(mode="json"),
    }


def run_init(
    workload: str,
    instruction: str,
    scale: str,
    output: Path,
    yes: bool,
    as_json: bool,
    out: Console,
    err: Console,
) -> None:
    """Build the contract, show it, confirm, write it."""
    try:
        manifest = find(workload)
        manifest.scale(scale)
    except InfraRSIError as exc:
        user_error(err, exc)
    try:
        contract, reading = init(
            manifest, scale, instruction, lambda text: err.print(f"note: {text}", markup=False)
        )
    except InitError as exc:
        user_error(err, "\nerror: ".join(exc.problems))
    if as_json:
        print(json.dumps(contract_json(contract), indent=2, ensure_ascii=False))
    else:
        show(contract, reading.understood, out)
    if not yes and not _confirmed(err):
        raise typer.Exit(1)
    contract.save(output)
    err.print(f"contract {contract.contract_hash[:12]} frozen in {output}", markup=False)


def _confirmed(err: Console) -> bool:
    if not sys.stdin.isatty():
        user_error(err, "not confirmed: run interactively, or add --yes to freeze this contract")
    return typer.confirm("Freeze this contract?", default=False, err=True)


def _budget_text(contract: Contract) -> str:
    parts = []
    if contract.budget.trials:
        parts.append(f"{contract.budget.trials} trials")
    if contract.budget.wall_time_s:
        parts.append(f"{contract.budget.wall_time_s:g} s of wall time")
    return ", ".join(parts) or "no limit given"


def show(contract: Contract, understood: list[tuple[str, str]], out: Console) -> None:
    """The contract as a table, what was understood, and what was not."""
    table = Table(title=f"task contract {contract.contract_hash[:12]}", title_justify="left")
    table.add_column("field")
    table.add_column("value")
    inv = contract.invariants
    rows = [
        ("workload", f"{contract.workload} (scale {contract.scale})"),
        ("objective", contract.objective),
        ("loss tolerance", f"{contract.correctness.loss_tolerance:.2%} relative"),
        (
            "memory capacity",
            format_bytes(contract.mem_cap_bytes) + " per rank"
            if contract.mem_cap_bytes
            else "none set",
        ),
        (
            "invariants",
            f"{inv.tokens_per_step} tokens/step, {inv.steps} steps, "
            f"seeds {inv.seeds}, data {inv.data_fingerprint[:12]}",
        ),
        ("editable", ", ".join(contract.editable) or "nothing"),
        ("locked", ", ".join(sorted(contract.locked))),
        ("budget", _budget_text(contract)),
    ]
    for field, value in rows:
        table.add_row(field, value)
    out.print(table)
    for clause, meaning in understood:
        out.print(f"  understood: {clause!r} -> {meaning}", markup=False)
    for clause in contract.not_understood:
        out.print(f"  [bold yellow]NOT understood:[/] {clause!r} (not applied)")
