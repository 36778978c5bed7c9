"""``infrarsi bank``: what the experience bank holds — list, show, stats, export, import,
forget — each as a table or, with ``--json``, one JSON object."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer
from rich.console import Console
from rich.table import Table

from infrarsi.cli.errors import user_error
from infrarsi.cli.options import BANK
from infrarsi.errors import InfraRSIError
from infrarsi.store.bank import BankStore, Experience

T = TypeVar("T")

bank_app = typer.Typer(
    help="Stage 5: the experience bank — what past runs measured, reused "
    "by the next run on a similar workload or host.",
    no_args_is_help=True,
)
out, err = Console(), Console(stderr=True)
BANK_OPTION = BANK  # the one --bank of every command
JSON_OPTION = typer.Option(False, "--json", help="print one JSON object")


def _or_fail(call: Callable[[], T]) -> T:
    """``call()``; a user error (the message, exit 2) when it raises InfraRSIError."""
    try:
        return call()
    except InfraRSIError as exc:
        user_error(err, exc)


def _open(url: str | None) -> BankStore:
    return _or_fail(lambda: BankStore(url))


def _answer(data: dict, as_json: bool, text: str | None = None) -> None:
    """What a command prints: one JSON object (``--json``), else ``text``, else each field
    on a line of its own (a list or mapping as JSON)."""
    if as_json:
        print(json.dumps(data))
        return
    lines = [text] if text is not None else [f"{k}: {_shown(v)}" for k, v in data.items()]
    for line in lines:
        out.print(line, markup=False, highlight=False, soft_wrap=True)


def _shown(value: object) -> object:
    return json.dumps(value) if isinstance(value, dict | list) else value


def _row(e: Experience) -> dict:
    """One experience as ``bank list`` shows it; ``hardware_id``: its host's fingerprint."""
    return {
        "id": e.id,
        "run_id": e.run_id,
        "stage": e.stage,
        "workload": e.workload,
        "scale": e.scale,
        "hardware_id": e.hardware_fp,
        "status": e.status,
        "speedup": e.speedup,
        "censored": e.censored,
        "peak_share": e.peak_share,
        "knobs": e.knobs_json,
        "patches": [p["id"] for p in e.patches_json],
    }


@bank_app.command("list")
def list_(
    bank: str | None = BANK_OPTION,
    as_json: bool = JSON_OPTION,
    workload: str | None = typer.Option(None, help="only this workload"),
    run: str | None = typer.Option(None, "--run", help="only this run id"),
    limit: int = typer.Option(50, min=1, help="rows shown (newest last)"),
) -> None:
    """The experiences, newest last."""
    store = _open(bank)
    rows = [_row(e) for e in store.experiences(workload=workload, run_id=run)][-limit:]
    if as_json:
        print(json.dumps({"bank": store.url, "experiences": rows}))
        return
    table = Table(
        "id",
        "run",
        "stage",
        "workload",
        "hardware",
        "status",
        "speed-up",
        "patches",
        title=f"{store.url}: {len(rows)} experiences shown",
    )
    for r in rows:
        speed = (
            "" if r["speedup"] is None else f"{'<=' if r['censored'] else ''}{r['speedup']:.3f}x"
        )
        table.add_row(
            str(r["id"]),
            r["run_id"],
            r["stage"],
            f"{r['workload']}@{r['scale']}",
            r["hardware_id"],
            r["status"],
            speed,
            "+".join(r["patches"]) or "-",
        )
    out.print(table)


@bank_app.command()
def show(
    experience_id: int = typer.Argument(..., help="an id from `infrarsi bank list`"),
    bank: str | None = BANK_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """One experience in full: signatures, knobs, patches (with their hashes), outcome."""
    store = _open(bank)
    e = _or_fail(lambda: store.experience(experience_id))
    _answer(e.model_dump(mode="json"), as_json)


@bank_app.command()
def stats(bank: str | None = BANK_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Counts by workload, host, stage and status; seeds given and how many held."""
    store = _open(bank)
    rows = store.experiences()
    seeds = store.seeds()
    data = {
        "bank": store.url,
        "experiences": len(rows),
        "runs": len({e.run_id for e in rows}),
        "by_workload": dict(Counter(f"{e.workload}@{e.scale}" for e in rows)),
        "by_host": dict(Counter(e.hardware_fp for e in rows)),
        "by_stage": dict(Counter(e.stage for e in rows)),
        "by_status": dict(Counter(e.status for e in rows)),
        "patch_texts": len(store.patch_texts()),
        "seeds_given": len(seeds),
        "seeds_held": sum(s.held is True for s in seeds),
        "seeds_not_held": sum(s.held is False for s in seeds),
    }
    _answer(data, as_json)


@bank_app.command("export")
def export(
    path: Path = typer.Argument(..., help="the JSON file to write"),
    bank: str | None = BANK_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Write the whole bank to one JSON file (for another host or a team's bank)."""
    store = _open(bank)
    counts = store.export(path)
    _answer({"bank": store.url, "file": str(path), **counts}, as_json, f"wrote {path}: {counts}")


@bank_app.command("import")
def import_(
    path: Path = typer.Argument(..., help="a file written by `infrarsi bank export`"),
    bank: str | None = BANK_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Add an exported bank's experiences (those already here are skipped)."""
    store = _open(bank)
    counts = _or_fail(lambda: store.import_file(path))
    data = {"bank": store.url, "file": str(path), **counts}
    _answer(data, as_json, f"imported {path}: {counts}")


@bank_app.command()
def forget(
    run: str = typer.Option(..., "--run", help="the run id whose experiences go"),
    bank: str | None = BANK_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Remove one run's experiences and seeds (e.g. a run measured on a loaded machine)."""
    store = _open(bank)
    removed = store.forget_run(run)
    if removed == 0:
        known = sorted({e.run_id for e in store.experiences()})
        user_error(err, f"the bank holds no run {run!r}; it holds {known[:10]}")
    data = {"bank": store.url, "run_id": run, "removed": removed}
    _answer(data, as_json, f"removed {removed} experiences of {run}")
