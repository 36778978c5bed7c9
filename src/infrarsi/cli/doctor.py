"""``infrarsi doctor``: run the measurements, print the report, store it, fill the noise policy."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.status import Status
from rich.table import Table

from infrarsi.cli.answer import keep_stdout_for_the_answer, print_answer
from infrarsi.cli.errors import user_error
from infrarsi.compose import audited, doctors_folder, new_ledger
from infrarsi.contract import load_contract
from infrarsi.doctor import UNDETECTABLE, headroom, run_doctor, sealed_contract
from infrarsi.errors import InfraRSIError
from infrarsi.executors.choice import make_executor
from infrarsi.folder_lock import holding
from infrarsi.options import SearchOptions
from infrarsi.records import DoctorReport
from infrarsi.records.trial import TrialRecord
from infrarsi.stages import Stage
from infrarsi.store import Ledger, RunStatus
from infrarsi.units import format_bytes


def run_doctor_command(
    contract_path: Path,
    repeats: int,
    workdir: Path,
    as_json: bool,
    out: Console,
    err: Console,
    calibrate: bool = True,
    executor: tuple[str, str | None] = ("local", None),
) -> None:
    """Doctor the contract's baseline; the contract gets the measured noise policy. Its trials
    run on the executor named by ``executor`` (kind, Ray address) and go, as each ends, into
    the ledger of the run ``infrarsi run`` then continues (``compose.doctors_folder``: this
    command is that round's composer — its store opened once, its audit heard)."""
    answer = keep_stdout_for_the_answer() if as_json else None
    try:
        contract = load_contract(contract_path)
        runner = make_executor(executor[0], Path(workdir).resolve(), executor[1])
        folder = doctors_folder(contract)
        with holding(folder):  # the folder's lock before its store and audit are opened
            ledger = audited(
                new_ledger(contract, folder, SearchOptions(), RunStatus.DOCTORING), folder
            )
            with err.status("doctor: measuring the hardware and the baseline ...") as status:
                report = run_doctor(
                    contract,
                    repeats,
                    workdir,
                    on_trial=_stored_and_shown(ledger, status),
                    calibrate_tolerances=calibrate,
                    executor=runner,
                )
    except InfraRSIError as exc:
        user_error(err, exc)
    sealed, report = sealed_contract(contract, report)
    report = report.model_copy(update={"run_dir": str(folder), "run_id": ledger.run_id})
    sealed.save(contract_path)
    Path(workdir).mkdir(parents=True, exist_ok=True)
    report.save(Path(workdir) / f"doctor-{sealed.contract_hash[:12]}.json")
    report.save(folder / f"doctor-{sealed.contract_hash[:12]}.json")  # `run` finds it there
    if answer is not None:
        print_answer(report.to_json(), answer)
    else:
        show(report, out)
    err.print(
        f"noise policy and equivalence tolerances written to {contract_path} (contract "
        f"{sealed.contract_hash[:12]}); the Doctor's trials are in the run folder {folder}, "
        "where `infrarsi run` continues",
        markup=False,
    )


def _stored_and_shown(ledger: Ledger, status: Status) -> Callable[[str, TrialRecord], None]:
    """What the Doctor calls as each of its trials ends: into the run's ledger, then shown."""

    def ended(label: str, record: TrialRecord) -> None:
        ledger.store.add_trial(ledger.run_id, Stage.DOCTOR, record, label=label)
        status.update(f"doctor: {label} ended {record.status.value} ({record.cost_s:.1f} s)")

    return ended


def show(report: DoctorReport, out: Console) -> None:
    """The report as a person reads it."""
    r = report
    mfu = f"{r.mfu_pct:.1f}%" if r.mfu_pct is not None else "-"
    out.print(
        f"[bold]{r.workload}[/] at scale {r.scale}: step_time_s "
        f"{r.step_time_s:.4f}, tokens_per_s {r.tokens_per_s:,.0f}, mfu {mfu} "
        f"(fp32 peak {r.peak_flops['fp32'] / 1e9:.0f} GFLOP/s, "
        f"bf16 {r.peak_flops['bf16'] / 1e9:.0f}), peak_mem "
        + ", ".join(format_bytes(b) for b in r.peak_mem_bytes)
        + f" ({r.peak_mem_source})"
    )
    if r.phases:
        _phase_table(r, out)
    for what, why in r.not_measured.items():
        out.print(f"{what}: {why}", markup=False)
    n = r.noise
    out.print(
        f"noise ({n.objective}, {n.runs} runs): cv within a run {n.cv_within:.1%}, "
        f"between runs {n.cv_between:.1%}; minimum detectable speed-up (95%, power 80%) "
        + ", ".join(f"{k} repeat(s) {v:.1f}%" for k, v in n.mde_pct.items())
        + f"; verifier repeats {n.recommended_repeats}",
        markup=False,
    )
    gain, undetectable = headroom(r)
    out.print(f"objective headroom: {gain}", markup=False)
    if undetectable:
        out.print(f"warning: {UNDETECTABLE}", markup=False)
    if r.top_ops:
        out.print(
            "top operators: " + ", ".join(f"{o['name']} {o['share']:.0%}" for o in r.top_ops[:5]),
            markup=False,
        )
    _equivalence(r, out)
    for i, d in enumerate(r.diagnosis, 1):
        suggests = ", ".join(d.suggests) or f"(no knob or patch with role {d.roles})"
        out.print(f"{i}. {d.finding} — {d.evidence} -> {suggests}", markup=False)


def _equivalence(r: DoctorReport, out: Console) -> None:
    eq = r.equivalence
    floors = ", ".join(f"{k} {v:.1e}" for k, v in eq.floors.items()) or "not measured"
    out.print(
        f"equivalence: noise floors {floors}; tolerances weights {eq.weight_rtol:.1e} "
        f"(bf16 {eq.weight_rtol_bf16:.1e}), held-out {eq.eval_rtol:.1e} (bf16 "
        f"{eq.eval_rtol_bf16:.1e}) of what the baseline learned",
        markup=False,
    )
    for kind, tols in eq.by_kind.items():
        out.print(
            f"  a change of {kind} is judged at "
            + ", ".join(f"{q} {v:.1e}" for q, v in tols.items()),
            markup=False,
        )
    for note in r.equivalence_notes:
        out.print(f"note: {note}", markup=False)


def _phase_table(report: DoctorReport, out: Console) -> None:
    step = report.phase_step_time_s or report.step_time_s
    unattributed = report.unattributed_s or 0.0
    table = Table(
        title=f"phases (s per steady step of the slowest rank; mean step {step:.4f} s)",
        title_justify="left",
    )
    for col in ("phase", "seconds", "share"):
        table.add_column(col)
    for name, seconds in sorted(report.phases.items(), key=lambda kv: -kv[1]):
        table.add_row(name, f"{seconds:.4f}", f"{seconds / step:.0%}")
    table.add_row("unattributed", f"{unattributed:.4f}", f"{unattributed / step:.0%}")
    out.print(table)
