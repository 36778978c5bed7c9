"""The screen of ``infrarsi optimize`` and ``infrarsi demo``: a stage-by-stage progress display,
then the headline numbers and where the report is (or one JSON object)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer
from rich.console import Console

from infrarsi.cli.answer import keep_stdout_for_the_answer, print_answer
from infrarsi.cli.errors import user_error
from infrarsi.errors import InfraRSIError
from infrarsi.events import (
    BankAdvised,
    BankIngested,
    CandidateDropped,
    Event,
    MeasurementEnded,
    Note,
    PatchesAsked,
    StageStarted,
    TrialEnded,
)
from infrarsi.identity import describe_changes
from infrarsi.optimize import OptimizeResult, optimize
from infrarsi.options import Budget, OptimizeOptions, ProposerOptions, SearchOptions
from infrarsi.records import Measurement
from infrarsi.stages import Stage
from infrarsi.units import format_ratio_bound

STAGES = {
    Stage.INIT: "Init: the contract",
    Stage.DOCTOR: "Doctor: baseline, noise, tolerances",
    Stage.RUN: "Run: the search",
    Stage.APPLY: "Apply: interleaved re-verification",
    Stage.REPORT: "Report",
    Stage.DERIVE: "the winner becomes the next baseline",
}


class OptimizeScreen:
    """Prints each stage as it starts and a line per trial, with the time spent."""

    def __init__(self, console: Console):
        self.console, self.t0 = console, time.monotonic()

    def _say(self, text: str) -> None:
        self.console.print(
            f"[{time.monotonic() - self.t0:6.0f} s] {text}", markup=False, highlight=False
        )

    def __call__(self, event: Event) -> None:
        line = _line(event)
        if line is not None:
            self._say(line)


def _line(event: Event) -> str | None:
    """The line ``optimize`` prints for an event (None: nothing)."""
    match event:
        case StageStarted(stage=stage, round=r, budget_trials=budget):
            extra = f" (budget {budget} trials)" if budget else ""
            return f"round {r}: {STAGES[stage]}{extra}"
        case Note(text=text):
            return text
        case BankAdvised():
            seeds = "; ".join(
                f"{_seed(s.knobs, s.patches)} (expects {s.expected_speedup:.2f}x, "
                f"similarity {s.similarity:.2f})"
                for s in event.seeds
            )
            return (
                f"round {event.round}: bank {event.url}: {event.used} of "
                f"{event.experiences} experiences similar enough; seeds: {seeds or 'none'}"
            )
        case BankIngested(round=r, added=added):
            return f"round {r}: bank: {added} experiences added"
        case TrialEnded(stage=Stage.DOCTOR, label=label, status=status):
            return f"  doctor: {label} {status}"
        case TrialEnded(seq=seq, changes=changes, status=status, ranked_time_per_step_s=t):
            times = _times(event.record, t, event.trial.error)
            return f"  trial {seq}: {changes} -> {status}{times}"
        case PatchesAsked(proposer=proposer, trials=trials):
            return f"  {proposer}: asked for a patch after {trials} trials"
        case CandidateDropped(label=label, round=r):
            return f"  apply: {label} dropped before round {r + 1} (cannot be promoted any more)"
        case MeasurementEnded(measurement=m):
            return (
                f"  apply {event.index + 1}/{event.total}: round {m.round + 1} "
                f"{m.label} {m.status}, compared time {m.compared_s or 0:.4f} s{_verdict(m)}"
            )
    return None


def _times(record, ranked_s: float | None, error: str | None = None) -> str:
    """A trial's times, each named: end to end, the steady step, and the time per step the
    search ranks by (the objective's); a trial that ended without them, its reason."""
    m = record.metrics if record is not None else None
    if m is None:  # it ended without metrics: its reason, in a line
        said = (getattr(record, "error", None) or error or "").strip().splitlines()
        return f": {said[-1][:160]}" if said else ""
    steady = m.harness_step_time_s or m.step_time_s
    ranked = f", ranked {ranked_s:.4f} s/step" if ranked_s else ""
    return f": end to end {m.e2e_time_s:.2f} s, steady step {steady:.4f} s{ranked}"


def _verdict(m: Measurement) -> str:
    if m.valid is None:
        return ""
    return " checks passed" if m.valid else " REFUSED: " + (m.reasons[0] if m.reasons else "")


def _seed(knobs: dict[str, object], patches: list[str]) -> str:
    return f"{' '.join(f'{k}={v}' for k, v in knobs.items())} {'+'.join(patches) or 'no patch'}"


def _x(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"


def headline(result: OptimizeResult) -> list[str]:
    """The numbers a person wants at the end: the baseline, then per round the bank's seeds and
    either its decision or three lines — what was promoted, the verified speed-up with its
    interval and what it compares, the report's and the patch's paths."""
    lines = []
    b = result.baseline
    if b.get("mfu_pct") is not None:
        lines.append(
            f"baseline: steady step {b['step_time_s']:.4f} s (step_time_s), MFU {b['mfu_pct']:.2f}%"
        )
    base = b.get("knobs", {})
    for r in result.rounds:
        lines += [_bank_seed_line(seed) for seed in r.bank_seeds]
        if r.winner is None:
            lines += [f"round {r.round}: {r.decision}", f"  report: {r.report_html}"]
            continue
        w = r.winner
        lines += [
            f"round {r.round}: promoted {describe_changes(w.knobs, w.patches, base)} "
            f"({r.trials} search trials, {r.oom_trials} OOM)",
            f"  verified {_x(w.speedup)}x [{format_ratio_bound(w.ci_low)}, "
            f"{format_ratio_bound(w.ci_high)}] on "
            f"{r.compared or 'the objective'} over {len(w.ratios)} interleaved rounds, "
            "every check passed",
            f"  report: {r.report_html}; patch: {Path(r.run_dir) / 'winner.patch'}",
        ]
    if result.cumulative_speedup and len(result.rounds) > 1:
        lines.append(f"overall: {result.cumulative_speedup:.3f}x; files in {result.run_dir}")
    return lines


def _bank_seed_line(seed: dict) -> str:
    held = {True: "held", False: "did not hold", None: "not measured"}[seed["held"]]
    measured = f", measured {seed['measured_speedup']:.2f}x" if seed["measured_speedup"] else ""
    return (
        f"  bank seed {_seed(seed['knobs'], seed['patches'])}: expected "
        f"{seed['expected_speedup']:.2f}x{measured}: {held}"
    )


def optimize_command(
    workload: str,
    instruction: str,
    options: OptimizeOptions,
    *,
    yes: bool,
    as_json: bool,
    out: Console,
    err: Console,
) -> None:
    """Run every stage; exit 0 with or without a promoted winner, 2 on bad input."""
    answer = keep_stdout_for_the_answer() if as_json else None
    screen = OptimizeScreen(err if as_json else out)
    try:
        result = optimize(
            workload,
            instruction,
            options,
            on_event=screen,
            confirm=None if yes else _confirm(err),
        )
    except InfraRSIError as exc:
        user_error(err, exc)
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM: say how to go on, then end
        err.print(how_to_resume(Path(options.out_dir)), markup=False, highlight=False)
        raise
    if answer is not None:
        print_answer(json.dumps(_json(result)), answer)
        return
    for line in headline(result):
        out.print(line, markup=False, highlight=False)


def how_to_resume(out_dir: Path) -> str:
    """What an interrupted ``optimize`` leaves and the commands that go on from it: the last
    round's search resumed, then its Apply and its report; or, stopped before a search
    began, the same command again."""
    runs = sorted(
        (p.parent for p in out_dir.glob("round-*/run/run.json")),
        key=lambda p: int(p.parent.name.split("-")[1]),
    )
    if not runs:
        return (
            f"interrupted before a search began: nothing in {out_dir} is resumed; run the same "
            "optimize command again"
        )
    last = runs[-1]
    return (
        f"interrupted: what ended is kept in {last}; go on with\n"
        f"  infrarsi run --resume {last}\n  infrarsi apply {last}\n  infrarsi report {last}"
    )


def _json(result: OptimizeResult) -> dict:
    data = result.model_dump(mode="json")
    return {
        "run_dir": data["run_dir"],
        "promoted": data["promoted"],
        "winner": data["winner"],
        "baseline": data["baseline"],
        "trials": data["trials"],
        "oom_trials": data["oom_trials"],
        "cumulative_speedup": data["cumulative_speedup"],
        "rounds": data["rounds"],
        "wall_s": data["wall_s"],
    }


def _confirm(err: Console):
    def ask(contract) -> bool:
        from infrarsi.cli.init import show

        show(contract, [], err)
        if not sys.stdin.isatty():
            user_error(err, "not confirmed: run interactively, or add --yes")
        return typer.confirm("Freeze this contract and optimize?", default=False, err=True)

    return ask


# throughput: at tiny a trial is ~6 s of which ~5.5 s is start-up, so no change to the training
# steps can move end-to-end time by what Apply detects (the Doctor's headroom says so); the
# steady step is what the demo's changes move
DEMO = dict(
    workload="dense-1node", instruction="maximise training throughput, keep the loss within 1%"
)
# Apply's rounds in the demo: a patch is timed by the harness's clock over the Doctor's timed
# steps, each round a few seconds longer than the contract's runs; five rounds confirm the
# catalog's ~1.2x gains within the demo's few minutes (the Doctor's own recommendation aims
# at 5% and would take ten)
DEMO_VERIFY_ROUNDS = 5


def demo_command(scale: str, budget: int, top: int, out: Console, err: Console) -> None:
    """``infrarsi demo``: optimize on the bundled dense-1node workload, offline."""
    out.print(
        f'demo: infrarsi optimize {DEMO["workload"]} "{DEMO["instruction"]}" --scale '
        f"{scale} --budget {budget} --top {top} --yes",
        markup=False,
        highlight=False,
    )
    options = OptimizeOptions(
        scale=scale,
        out_dir=Path(".infrarsi") / "optimize" / time.strftime("%Y%m%d-%H%M%S"),
        top_k=top,
        verify_rounds=DEMO_VERIFY_ROUNDS,
        search=SearchOptions(budget=Budget(trials=budget)),
        proposer=ProposerOptions(kind="catalog"),  # offline, always
    )
    optimize_command(
        DEMO["workload"], DEMO["instruction"], options, yes=True, as_json=False, out=out, err=err
    )
