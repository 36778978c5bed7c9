"""The prompt the patch agent sends: the contract, the Doctor's findings, the editable files,
the knobs, and every earlier proposal with what became of it.

Earlier proposals come back to the model as facts: a rejected one with its stage and reason
(so the next does not repeat the mistake), an accepted one with its smoke figure and what the
search measured of it (speed-up and peak over the baseline, failures), and the catalog's
patches with their measured outcomes (so it does not rewrite one).
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

from infrarsi.contract import Contract
from infrarsi.proposal import PatchOutcome, ProposalLine, ProposalStatus
from infrarsi.records import DoctorReport

FILE_CHARS = 24_000  # of one editable file's text
ALL_FILES_CHARS = 60_000  # of all of them together
TOP_OPS = 8

SYSTEM = """You are a performance engineer speeding up a PyTorch training job without changing
what it computes. You write one code patch at a time. Rules:
- Edit only the editable files listed; never a locked file.
- Keep the model, the data, the optimizer, the number of steps, the tokens per optimizer
  step and the loss exactly as they are: the harness compares the final parameters and a
  held-out loss computed by the reference code with the baseline's, within tolerances.
- Do not read or write files, the clock, the environment or other processes; do not change
  precision, what gets a gradient, or monkeypatch modules: a static screen rejects such lines.
- Launch parameters (knobs) are searched separately: change code, not knob values.
Answer with exactly one unified diff (paths relative to the workload folder, with a/ and b/
prefixes) in a ```diff block, then one ```json block:
{"step_time_ratio": <expected step time / baseline's>, "peak_mem_ratio": <expected peak
memory / baseline's>, "addresses": "<the finding or operator it targets>"}"""


def messages(
    contract: Contract,
    report: DoctorReport | None,
    history: list[ProposalLine],
    outcomes: list[PatchOutcome],
) -> list[dict]:
    """The chat messages of one request."""
    manifest = contract.manifest()
    parts = [
        _contract(contract),
        _doctor(report),
        _knobs(manifest),
        _catalog(manifest, outcomes),
        _history(history, outcomes),
        _files(manifest, contract.editable),
    ]
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "\n\n".join(p for p in parts if p)},
    ]


def _contract(c: Contract) -> str:
    locked = ", ".join(sorted(c.locked)) or "none"
    return (
        f"# Contract\nworkload {c.workload} at scale {c.scale}; objective {c.objective}\n"
        f"tokens per optimizer step {c.invariants.tokens_per_step}, steps "
        f"{c.invariants.steps} (both fixed)\nloss tolerance {c.correctness.loss_tolerance:g} "
        f"(relative); final-parameter tolerance {c.equivalence.weight_rtol:g}, held-out "
        f"loss tolerance {c.equivalence.eval_rtol:g} (fp32)\n"
        f"editable: {', '.join(c.editable)}\nlocked: {locked}\n"
        f"memory capacity per rank: {c.mem_cap_bytes or 'none'} bytes"
    )


def _doctor(report: DoctorReport | None) -> str:
    if report is None:
        return ""
    lines = [
        f"# The Doctor's diagnosis of the baseline\nsteady step {report.step_time_s:.4g} s; "
        f"phases (s per step): {json.dumps({k: round(v, 5) for k, v in report.phases.items()})}"
    ]
    lines += [
        f"- {f.finding} ({f.share_of_step:.0%} of the step): {f.evidence}" for f in report.diagnosis
    ]
    if report.top_ops:
        lines.append(
            "top operators: "
            + "; ".join(
                ", ".join(f"{k}={v}" for k, v in op.items()) for op in report.top_ops[:TOP_OPS]
            )
        )
    return "\n".join(lines)


def _knobs(manifest) -> str:
    return "# Knobs (searched separately)\n" + "\n".join(
        f"- {k.name} ({k.type}): default {k.default}"
        + (f", values {list(k.values)}" if k.values else "")
        for k in manifest.knobs
    )


def _catalog(manifest, outcomes: list[PatchOutcome]) -> str:
    if not manifest.patches:
        return ""
    measured = {o.patch_id: o for o in outcomes}
    lines = ["# Patches already in the workload's catalog (do not rewrite them)"]
    for p in manifest.patches:
        lines.append(f"- {p.id}: {p.title}" + _measured(measured.get(p.id)))
    return "\n".join(lines)


def _history(history: list[ProposalLine], outcomes: list[PatchOutcome]) -> str:
    if not history:
        return ""
    measured = {o.patch_id: o for o in outcomes}
    lines = ["# Your earlier proposals in this run"]
    for h in history:
        if h.status is ProposalStatus.REJECTED:
            lines.append(f"- proposal {h.n}: REJECTED at {h.stage}: {h.reason}")
        else:
            smoke = f"; smoke trial {h.smoke_speedup:.3f}x" if h.smoke_speedup else ""
            lines.append(
                f"- proposal {h.n}: ACCEPTED as {h.patch_id}{smoke}"
                + _measured(measured.get(h.patch_id or ""))
            )
    return "\n".join(lines)


def _measured(o: PatchOutcome | None) -> str:
    if o is None or not o.trials:
        return "; not measured yet"
    out = f"; measured in {o.trials} trial(s)"
    if o.speedup:
        out += f": speed-up {o.speedup:.3f}x over the baseline"
    if o.peak_mem_ratio:
        out += f", peak memory {o.peak_mem_ratio:.2f}x"
    if o.failures:
        out += "; failures: " + " | ".join(o.failures)
    return out


def _files(manifest, editable: list[str]) -> str:
    root, left = Path(manifest.root), ALL_FILES_CHARS
    out = ["# Editable files"]
    names = sorted(
        {
            Path(p).relative_to(root).as_posix()
            for g in editable
            for p in glob.glob(str(root / g), recursive=True)
            if Path(p).is_file()
        }
    )
    for name in names:
        text = (root / name).read_text(errors="replace")
        if left <= 0:
            out.append(f"## {name}\n(left out: the prompt's file budget is spent)")
            continue
        shown = text[: min(FILE_CHARS, left)]
        left -= len(shown)
        cut = "" if len(shown) == len(text) else f"\n... ({len(text) - len(shown)} chars cut)"
        out.append(f"## {name}\n```python\n{shown}{cut}\n```")
    return "\n".join(out)
