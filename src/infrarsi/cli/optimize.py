"""The screen of ``infrarsi optimize`` and ``infrarsi demo``: a stage-by-stage progress display,
then the headline numbers and where the report is (or one JSON object)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer
from rich.console import Console

from infrarsi.cli.errors import user_error
from infrarsi.errors import InfraRSIError
from infrarsi.optimize import OptimizeResult, optimize

STAGES = {
    "init": "Init: the contract",
    "doctor": "Doctor: baseline, noise, tolerances",
    "run": "Run: the search",
    "apply": "Apply: interleaved re-verification",
    "report": "Report",
    "derive": "the winner becomes the next baseline",
}


class OptimizeScreen:
    """Prints each stage as it starts and a line per trial, with the time spent."""

    def __init__(self, console: Console):
        self.console, self.t0 = console, time.monotonic()

    def _say(self, text: str) -> None:
        self.console.print(
            f"[{time.monotonic() - self.t0:6.0f} s] {text}", markup=False, highlight=False
        )

    def __call__(self, stage: str, data: dict) -> None:
        if stage in STAGES:
            extra = f" (budget {data['budget']} trials)" if data.get("budget") else ""
            self._say(f"round {data.get('round', '')}: {STAGES[stage]}{extra}")
        elif stage == "note":
            self._say(data["text"])
        elif stage == "bank":
            seeds = (
                "; ".join(
                    f"{_seed(s)} (expects {s['expected_speedup']:.2f}x, similarity "
                    f"{s['similarity']:.2f})"
                    for s in data["seeds"]
                )
                or "none"
            )
            self._say(
                f"round {data['round']}: bank {data['url']}: {data['used']} of "
                f"{data['experiences']} experiences similar enough; seeds: {seeds}"
            )
        elif stage == "bank-ingest":
            self._say(f"round {data['round']}: bank: {data['added']} experiences added")
        elif stage == "trial":
            self._say(f"  doctor: {data['label']} {data['status']}")
        elif stage == "search" and data["kind"] == "propose":
            self._say(f"  {data['proposer']}: asked for a patch after {data['trials']} trials")
        elif stage == "search" and data["kind"] == "end":
            o = data["outcome"]
            step = f"{o.step_time_s:.4f} s/step" if o.step_time_s else ""
            self._say(f"  trial {data['seq']}: {data['config'].describe()} -> {o.status} {step}")
        elif stage == "verify" and data["kind"] == "drop":
            self._say(
                f"  apply: {data['label']} dropped before round {data['round'] + 1} "
                "(cannot be promoted any more)"
            )
        elif stage == "verify" and data["kind"] == "end":
            m = data["measurement"]
            check = (
                ""
                if m.valid is None
                else (
                    " checks passed"
                    if m.valid
                    else " REFUSED: " + (m.reasons[0] if m.reasons else "")
                )
            )
            self._say(
                f"  apply {data['index'] + 1}/{data['total']}: round {m.round + 1} "
                f"{m.label} {m.status} {m.compared_s or 0:.4f} s{check}"
            )


def _seed(seed: dict) -> str:
    knobs = " ".join(f"{k}={v}" for k, v in seed["knobs"].items())
    return f"{knobs} {'+'.join(seed['patches']) or 'no patch'}"


def headline(result: OptimizeResult) -> list[str]:
    """The numbers a person wants at the end."""
    lines = []
    for r in result.rounds:
        if r.promoted:
            w = r.winner
            lines.append(
                f"round {r.round}: {w['speedup']:.3f}x [{w['ci_low']:.3f}, "
                f"{w['ci_high']:.3f}] with patches {w['patches'] or 'none'}; "
                f"{r.trials} trials, {r.oom_trials} OOM"
            )
        else:
            lines.append(f"round {r.round}: {r.decision}")
        for seed in r.bank_seeds:
            held = {True: "held", False: "did not hold", None: "not measured"}[seed["held"]]
            measured = (
                f", measured {seed['measured_speedup']:.2f}x" if seed["measured_speedup"] else ""
            )
            lines.append(
                f"  bank seed {_seed(seed)}: expected {seed['expected_speedup']:.2f}x"
                f"{measured}: {held}"
            )
        lines.append(f"  report: {r.report_html}")
    b = result.baseline
    if b.get("mfu_pct") is not None:
        lines.append(f"baseline: {b['step_time_s']:.4f} s/step, MFU {b['mfu_pct']:.2f}%")
    if result.cumulative_speedup:
        lines.append(f"overall: {result.cumulative_speedup:.3f}x; files in {result.run_dir}")
    return lines


def optimize_command(
    workload: str,
    instruction: str,
    scale: str,
    budget: int | None,
    rounds: int,
    top: int,
    out_dir: Path | None,
    yes: bool,
    seed: int,
    as_json: bool,
    out: Console,
    err: Console,
    verify_rounds: int | None = None,
    doctor_repeats: int = 3,
    bank: str | None = None,
    use_bank: bool = True,
    proposing: tuple = ("catalog", None),
    executor: tuple = ("local", None),
    parallel: int = 1,
) -> None:
    """Run every stage; exit 0 with or without a promoted winner, 2 on bad input.
    ``proposing``: (the proposer's kind or None for the default, the LLM's budget)."""
    screen = OptimizeScreen(err if as_json else out)
    directory = out_dir or Path(".infrarsi") / "optimize" / time.strftime("%Y%m%d-%H%M%S")
    try:
        result = optimize(
            workload,
            instruction,
            scale,
            budget,
            rounds,
            directory,
            top_k=top,
            doctor_repeats=doctor_repeats,
            verify_rounds=verify_rounds,
            seed=seed,
            on_stage=screen,
            confirm=None if yes else _confirm(err),
            bank=bank,
            use_bank=use_bank,
            proposer=proposing[0],
            executor=executor[0],
            ray_address=executor[1],
            parallel=parallel,
            **({"llm_budget": proposing[1]} if proposing[1] else {}),
        )
    except InfraRSIError as exc:
        user_error(err, exc)
    if as_json:
        print(json.dumps(_json(result)))
        return
    for line in headline(result):
        out.print(line, markup=False, highlight=False)


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


DEMO = dict(workload="dense-1node", instruction="cut time-to-train, loss within 1%")


def demo_command(scale: str, budget: int, top: int, out: Console, err: Console) -> None:
    """``infrarsi demo``: optimize on the bundled dense-1node workload, offline."""
    out.print(
        f'demo: infrarsi optimize {DEMO["workload"]} "{DEMO["instruction"]}" --scale '
        f"{scale} --budget {budget} --top {top} --yes",
        markup=False,
        highlight=False,
    )
    optimize_command(
        DEMO["workload"],
        DEMO["instruction"],
        scale,
        budget,
        1,
        top,
        None,
        True,
        0,
        False,
        out,
        err,
        proposing=("catalog", None),
    )  # offline, always
