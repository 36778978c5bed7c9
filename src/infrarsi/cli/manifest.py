"""``infrarsi manifest draft -- COMMAND``: a workload manifest drafted from the command you run
today, shown for confirmation and written (issue 39)."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml
from rich.console import Console

from infrarsi.cli.errors import user_error
from infrarsi.errors import InfraRSIError

manifest_app = typer.Typer(
    help="Workload manifests: draft one from the command you run today.", no_args_is_help=True
)
out, err = Console(), Console(stderr=True)


@manifest_app.command(
    "draft", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def draft(
    command: list[str] = typer.Argument(
        ..., help="the command you run today, after --: -- python train.py --batch_size 8"
    ),
    output: Path = typer.Option(Path("workload.yaml"), "-o", "--output", help="manifest file"),
    yes: bool = typer.Option(False, "--yes", help="write it without asking"),
    timeout_s: float = typer.Option(120.0, "--timeout", help="seconds the dry run may take"),
    role: list[str] = typer.Option(
        [],
        "--role",
        help="NAME=ROLE: an argument the draft could not tell (steps, seed, micro_batch, "
        "grad_accum, precision, threads, ...), e.g. --role num-updates=steps; repeatable",
    ),
) -> None:
    """Draft workload.yaml from your command and script (run from the script's folder): the
    knobs, the steps, the metrics read from a dry run of a few steps; shown, then written."""
    from infrarsi.draft.assemble import draft_manifest
    from infrarsi.host import usable_threads
    from infrarsi.workloads import load_manifest

    named = {}
    for given in role:
        name, sep, what = given.partition("=")
        if not sep or not name or not what:
            user_error(err, f"--role {given}: give NAME=ROLE, e.g. --role num-updates=steps")
        named[name] = what
    try:
        drafted = draft_manifest(
            list(command), Path.cwd(), usable_threads(), timeout_s, named=named
        )
    except InfraRSIError as exc:
        user_error(err, exc)
    text = yaml.safe_dump(drafted.manifest, sort_keys=False, width=100)
    out.print(text, markup=False, highlight=False)
    for note in drafted.notes:
        err.print(f"note: {note}", markup=False)
    if not yes and not typer.confirm(f"Write {output}?", default=True, err=True):
        user_error(err, "not written: run again, or add --yes")
    output.write_text(text)
    try:
        load_manifest(output)
    except InfraRSIError as exc:
        user_error(err, f"{output} was written but does not validate: {exc}")
    err.print(
        f"{output} written and valid (dry run {drafted.dry_run_s:.0f} s); next: infrarsi "
        f'optimize {output} "maximise training throughput, keep the loss within 1%"',
        markup=False,
    )
