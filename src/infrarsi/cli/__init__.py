"""The ``infrarsi`` command line: one command per stage, plus workloads, trial and demo.

Exit codes: 0 success (a trial that ended ``ok``); 1 a trial ran but did not end ``ok``;
2 bad input (an ``InfraRSIError``: unknown workload, bad manifest, knob or patch refused, a bank
that cannot be opened); 3 a bug in InfraRSI (any other exception, shown with its traceback).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.table import Table

from infrarsi import units
from infrarsi.cli.errors import environment_error, report_bug, user_error
from infrarsi.cli.options import (
    EXECUTOR,
    GROUPED,
    JSON,
    PARALLEL,
    RAY_ADDRESS,
    SEED,
    grouped,
)
from infrarsi.errors import InfraRSIError
from infrarsi.executors import LocalExecutor, TrialRequest
from infrarsi.executors.choice import make_executor
from infrarsi.options import (
    APPLY_TOP_K,
    DEFAULT_BUDGET_TRIALS,
    BankOptions,
    Budget,
    ExecutorOptions,
    OptimizeOptions,
    ProposerOptions,
    SearchOptions,
)
from infrarsi.trial import TrialRecord, TrialStatus
from infrarsi.workloads import all_reference, find, parse_assignments

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Make PyTorch training jobs measurably faster without changing what they compute.",
)
out = Console()
err = Console(stderr=True)
if not out.is_terminal:  # logs and pipes: do not squeeze tables into 80 columns
    out.width = 150
DEFAULT_WORKDIR = Path(".infrarsi") / "trials"
MAX_TRIALS = 100_000  # a trial budget past this is a typo, not a plan


def fail(message: str | InfraRSIError) -> NoReturn:
    """Print one error line (or a few) to stderr and exit 2: bad input."""
    user_error(err, message)


@app.command()
def workloads(
    workload: str | None = typer.Argument(
        None, help="a bundled name or the path of a workload.yaml (default: every bundled workload)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Show workloads with their knobs, scales and patch catalogs: the bundled ones, or one."""
    try:
        manifests = [find(workload)] if workload else all_reference()
    except InfraRSIError as exc:
        fail(exc)
    if as_json:
        print(json.dumps([_workload_summary(m) for m in manifests], indent=2))
        return
    for manifest in manifests:
        _print_workload(manifest)


@app.command()
def validate(
    path: str = typer.Argument(..., help="a workload.yaml or the folder holding it"),
) -> None:
    """Check a workload manifest: exit 0 and a summary, or exit 2 naming every bad field —
    a baseline its own constraints refuse included, as init would."""
    from infrarsi.workloads import knobs as knob_rules

    try:
        manifest = find(path)
        for scale in manifest.scales:  # what init and every trial resolve first
            knob_rules.resolve(manifest, scale, {})
    except InfraRSIError as exc:
        fail(exc)
    how = (
        "probe"
        if manifest.launch.metrics == "probe"
        else "the observed optimizer"
        if manifest.launch.observed
        else "stdout patterns"
    )
    out.print(
        f"ok: {manifest.name} ({manifest.path}): {len(manifest.knobs)} knobs, "
        f"{len(manifest.patches)} patches, scales {', '.join(manifest.scales)}, "
        f"metrics from {how}",
        markup=False,
    )
    untagged = [k.name for k in manifest.knobs if k.role is None]
    if untagged:
        out.print(
            f"note: knobs without a role are never suggested by the diagnosis: "
            f"{', '.join(untagged)}",
            markup=False,
        )


def _print_workload(manifest) -> None:
    table = Table(title=f"{manifest.name}: {manifest.description.strip()}", title_justify="left")
    for column in ("knob", "role", "type", "values", "baseline"):
        table.add_column(column)
    for knob in manifest.knobs:
        table.add_row(
            knob.name,
            knob.role or "-",
            knob.type + (f" ({knob.flag})" if knob.flag else ""),
            ", ".join(map(str, knob.values)),
            str(knob.default) if knob.derive is None else f"= {knob.derive}",
        )
    out.print(table)
    out.print("patches: " + (", ".join(p.id for p in manifest.patches) or "none"))
    out.print("scales: " + ", ".join(manifest.scales) + "\n")


def _workload_summary(manifest) -> dict:
    return {
        "name": manifest.name,
        "description": manifest.description.strip(),
        "scales": sorted(manifest.scales),
        "knobs": [k.model_dump(exclude_none=True) for k in manifest.knobs],
        "constraints": [c.model_dump() for c in manifest.constraints],
        "patches": [p.id for p in manifest.patches],
        "patch_catalog": [p.model_dump() for p in manifest.patches],
        "files": manifest.files.model_dump(),
    }


# options several commands share (each the same flag, default and help everywhere)


@app.command()
def trial(
    workload: str = typer.Argument(..., help="bundled workload name or path to workload.yaml"),
    scale: str = typer.Option("tiny", help="scale preset: tiny, cpu or gpu"),
    set_: list[str] = typer.Option([], "--set", help="KNOB=VALUE, repeatable"),
    patch: list[str] = typer.Option(
        [], "--patch", help="catalog patch id or path to a .diff file, repeatable"
    ),
    mem_cap: str | None = typer.Option(
        None, "--mem-cap", help="per-rank memory capacity, e.g. 300MiB or bytes"
    ),
    timeout: float | None = typer.Option(None, help="seconds; default: the scale's"),
    workdir: Path = typer.Option(DEFAULT_WORKDIR, help="where trial folders are written"),
    contract: Path | None = typer.Option(
        None, help="run under this frozen contract: its capacity, its hash on the record"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the trial record as JSON"),
    executor: str = EXECUTOR,
    ray_address: str | None = RAY_ADDRESS,
) -> None:
    """Run one isolated, measured trial of a workload under a knob assignment and patches."""
    try:
        manifest = find(workload)
        cap = units.parse_bytes(mem_cap) if mem_cap is not None else None
        frozen = _checked_contract(contract, manifest) if contract else None
        if frozen is not None and cap is None:
            cap = frozen.mem_cap_bytes
        request = TrialRequest(
            workload=str(manifest.path) if Path(workload).exists() else workload,
            scale=scale,
            knobs=parse_assignments(set_),
            patches=[_patch_path(p) for p in patch],
            mem_cap_bytes=cap,
            timeout_s=timeout,
            workdir=str(workdir.resolve()),
            contract_hash=frozen.contract_hash if frozen else None,
        )
        LocalExecutor(Path.cwd()).resolve(request)  # a bad request is refused before anything
        runner = make_executor(executor, Path.cwd(), ray_address)
    except InfraRSIError as exc:
        fail(exc)
    with err.status(f"trial of {manifest.name} at scale {scale} ..."):
        record = runner.run(request)
    if as_json:
        print(json.dumps(trial_json(record), indent=2))
    else:
        print_trial(record)
    raise typer.Exit(0 if record.status is TrialStatus.OK else 1)


def _patch_path(patch: str) -> str:
    """A diff file as an absolute path (the executor resolves paths against its root), a
    catalog id as given."""
    return str(Path(patch).resolve()) if Path(patch).is_file() else patch


def _checked_contract(path: Path, manifest):
    """The contract at ``path``, refused when edited, for another workload, or stale."""
    from infrarsi.contract import load_contract

    frozen = load_contract(path)
    if frozen.workload != manifest.name:
        raise InfraRSIError(f"{path} is a contract for {frozen.workload}, not {manifest.name}")
    frozen.check_locked(manifest.root)
    return frozen


def trial_json(record: TrialRecord) -> dict:
    """The trial record as the JSON object ``infrarsi trial --json`` prints."""
    return record.model_dump(mode="json")


def print_trial(record: TrialRecord) -> None:
    """A readable summary of one trial."""
    colour = "green" if record.status is TrialStatus.OK else "red"
    out.print(
        f"trial {record.trial_id}: [{colour}]{record.status.value}[/]  "
        f"(cost {record.cost_s:.1f} s, folder {record.trial_dir})"
    )
    out.print("knobs: " + " ".join(f"{k}={v}" for k, v in record.knobs.items()))
    out.print("patches: " + (", ".join(p.id for p in record.patches) or "none"))
    if record.error:
        out.print(f"[{colour}]error:[/] ", end="")
        out.print(record.error, markup=False, highlight=False)
    m = record.metrics
    if m is None:
        return
    table = Table(show_header=True)
    for column in (
        "step_time_s",
        "tokens_per_s",
        "e2e_time_s",
        "peak_mem (per rank)",
        "loss first -> last",
    ):
        table.add_column(column)
    table.add_row(
        f"{m.step_time_s:.4f}",
        f"{m.tokens_per_s:,.0f}",
        f"{m.e2e_time_s:.2f}",
        ", ".join(units.format_bytes(b) if b is not None else "unknown" for b in m.peak_mem_bytes),
        f"{m.loss[0]:.4f} -> {m.loss[-1]:.4f}",
    )
    out.print(table)


@app.command()
def demo(
    scale: str = typer.Option(
        "steady",
        help="scale preset (steady: tiny's model over 48 steps, so the steps it "
        "optimises are measured well)",
    ),
    budget: int = typer.Option(8, min=3, max=MAX_TRIALS, help="search trials"),
    top: int = typer.Option(2, min=1, help="candidates Apply re-measures"),
) -> None:
    """optimize on the bundled dense-1node workload, offline: Init, Doctor, Run, Apply, Report."""
    from infrarsi.cli.optimize import demo_command

    demo_command(scale, budget, top, out, err)


@app.command()
def init(
    workload: str = typer.Argument(..., help="bundled workload name or path to workload.yaml"),
    instruction: str = typer.Argument(..., help="what you want, in one sentence"),
    scale: str = typer.Option("tiny", help="scale preset: tiny, cpu or gpu"),
    output: Path = typer.Option(Path("contract.yaml"), "-o", "--output", help="contract file"),
    yes: bool = typer.Option(False, "--yes", help="freeze without asking"),
    as_json: bool = typer.Option(False, "--json", help="print the contract as JSON"),
) -> None:
    """Stage 1: turn an instruction into a frozen task contract."""
    from infrarsi.cli.init import run_init

    run_init(workload, instruction, scale, output, yes, as_json, out, err)


@app.command()
def doctor(
    contract: Path = typer.Argument(..., help="contract.yaml written by init"),
    repeats: int = typer.Option(3, min=2, help="baseline runs (noise needs at least 2)"),
    workdir: Path = typer.Option(DEFAULT_WORKDIR, help="where trial folders are written"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    calibrate: bool = typer.Option(
        True,
        "--calibrate/--no-calibrate",
        help="measure the noise floor of what is learned (another "
        "batch split, bf16) and set the equivalence "
        "tolerances from it",
    ),
    executor: str = EXECUTOR,
    ray_address: str | None = RAY_ADDRESS,
) -> None:
    """Stage 2: profile the baseline, measure peak, noise and tolerances, diagnose."""
    from infrarsi.cli.doctor import run_doctor_command

    run_doctor_command(
        contract, repeats, workdir, as_json, out, err, calibrate, executor=(executor, ray_address)
    )


@app.command()
@grouped
def run(
    contract: Path | None = typer.Argument(None, help="contract.yaml (from init, doctored)"),
    budget: int | None = typer.Option(
        None, "--budget", min=1, max=MAX_TRIALS, help="trials to run"
    ),
    budget_s: float | None = typer.Option(None, "--budget-s", min=1, help="wall seconds to spend"),
    searcher: str = typer.Option("infrarsi", help="infrarsi, random, greedy, tpe, gp or grid"),
    resume: Path | None = typer.Option(None, "--resume", help="continue the run in RUN_DIR"),
    run_dir: Path | None = typer.Option(
        None, "--run-dir", help="where the run lives (default .infrarsi/runs/<contract>)"
    ),
    store: str | None = typer.Option(
        None, "--store", help="a SQLAlchemy URL (default: SQLite in the run directory)"
    ),
    seed: int = SEED,
    as_json: bool = JSON,
    bank: BankOptions = GROUPED,
    proposer: ProposerOptions = GROUPED,
    executor: ExecutorOptions = GROUPED,
    parallel: int = PARALLEL,
) -> None:
    """Stage 3: search knobs and patches together with the step-time and memory models."""
    from infrarsi.cli.run import RunCommand, run_command

    try:
        search = SearchOptions(
            searcher=searcher,
            budget=Budget(trials=budget, seconds=budget_s),
            seed=seed,
            parallel=parallel,
            store_url=store,
        )
    except InfraRSIError as exc:
        fail(exc)
    command = RunCommand(
        contract=contract,
        resume=resume,
        run_dir=run_dir,
        search=search,
        bank=bank,
        proposer=proposer,
        executor=executor,
        as_json=as_json,
    )
    run_command(command, out, err)


@app.command()
@grouped
def apply(
    run_dir: Path = typer.Argument(..., help="a run directory written by `infrarsi run`"),
    top: int = typer.Option(APPLY_TOP_K, "--top", min=1, help="candidates to re-measure"),
    rounds: int | None = typer.Option(
        None,
        "--rounds",
        min=2,
        help="interleaved rounds (default: what the Doctor's noise analysis needs)",
    ),
    to_branch: str | None = typer.Option(
        None,
        "--to-branch",
        help="commit the winner on a new branch of the workload's git repository",
    ),
    as_json: bool = JSON,
    bank: BankOptions = GROUPED,
    executor: ExecutorOptions = GROUPED,
) -> None:
    """Stage 4: re-verify the best candidates against the baseline, interleaved; promote only
    what holds; write winner.patch, launch.sh, audit.jsonl and the verification table."""
    from infrarsi.cli.apply import ApplyCommand, apply_command

    command = ApplyCommand(
        run_dir=run_dir,
        top=top,
        rounds=rounds,
        branch=to_branch,
        bank=bank,
        executor=executor,
        as_json=as_json,
    )
    apply_command(command, out, err)


@app.command()
def report(
    run_dir: Path = typer.Argument(..., help="a run directory (after `infrarsi apply`)"),
) -> None:
    """Stage 4: write report.md and a self-contained report.html of a run."""
    from infrarsi.report import write_report

    try:
        written = write_report(run_dir)
    except InfraRSIError as exc:
        fail(exc)
    out.print(f"report: {written.markdown} and {written.html}", markup=False, highlight=False)


from infrarsi.cli.bank import bank_app  # noqa: E402 - the sub-commands of `infrarsi bank`

app.add_typer(bank_app, name="bank")
from infrarsi.cli.manifest import manifest_app  # noqa: E402 - `infrarsi manifest draft`

app.add_typer(manifest_app, name="manifest")


@app.command()
@grouped
def optimize(
    workload: str = typer.Argument(..., help="bundled workload name or path to workload.yaml"),
    instruction: str = typer.Argument(..., help="what you want, in one sentence"),
    scale: str = typer.Option("tiny", help="scale preset"),
    budget: int | None = typer.Option(
        None,
        "--budget",
        min=1,
        max=MAX_TRIALS,
        help=f"search trials per round (default: the instruction's, else {DEFAULT_BUDGET_TRIALS})",
    ),
    rounds: int = typer.Option(
        1, "--rounds", min=1, help="the winner becomes the next round's baseline"
    ),
    top: int = typer.Option(APPLY_TOP_K, "--top", min=1, help="candidates Apply re-measures"),
    verify_rounds: int | None = typer.Option(
        None,
        "--verify-rounds",
        min=2,
        help="Apply's "
        "interleaved rounds (default: what the "
        "Doctor's noise analysis needs, 5 to 10)",
    ),
    doctor_repeats: int = typer.Option(
        3, "--doctor-repeats", min=2, help="baseline runs of the Doctor"
    ),
    out_dir: Path | None = typer.Option(
        None, "--out", help="where the rounds are written (default .infrarsi/optimize/<time>)"
    ),
    yes: bool = typer.Option(False, "--yes", help="freeze the contract without asking"),
    seed: int = SEED,
    as_json: bool = JSON,
    bank: BankOptions = GROUPED,
    proposer: ProposerOptions = GROUPED,
    executor: ExecutorOptions = GROUPED,
    parallel: int = PARALLEL,
) -> None:
    """All stages from one instruction: Init -> Doctor -> Run -> Apply -> Report."""
    from infrarsi.cli.optimize import optimize_command

    try:
        options = OptimizeOptions(
            scale=scale,
            rounds=rounds,
            out_dir=out_dir or Path(".infrarsi") / "optimize" / time.strftime("%Y%m%d-%H%M%S"),
            top_k=top,
            doctor_repeats=doctor_repeats,
            verify_rounds=verify_rounds,
            search=SearchOptions(budget=Budget(trials=budget), seed=seed, parallel=parallel),
            executor=executor,
            proposer=proposer,
            bank=bank,
        )
    except InfraRSIError as exc:
        fail(exc)
    optimize_command(workload, instruction, options, yes=yes, as_json=as_json, out=out, err=err)


def _terminate(signum, frame) -> None:
    """SIGTERM ends the tool like Ctrl-C does: running trials are ended, nothing left behind."""
    raise SystemExit(128 + signum)


def main() -> None:
    """Console-script entry point."""
    signal.signal(signal.SIGTERM, _terminate)
    try:
        _answered()
    except typer.Exit as done:  # an answer given here, outside a command
        raise SystemExit(done.exit_code) from None


def _answered() -> None:
    """The app, whatever it raises turned into an answer: bad input, the machine's files,
    a number too large, or a bug said as one."""
    try:
        app()
    except InfraRSIError as exc:  # bad input found outside a command's own handler
        fail(exc)
    except OverflowError:  # a number no counter holds (--budget 2**64)
        fail("a number given is too large for the tool to hold: give a smaller one")
    except Exception as exc:  # a path, a disk or a store the user can fix; else a bug
        environment_error(err, exc)
        report_bug(err, exc)
