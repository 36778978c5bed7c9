"""The GPU check: each one-node workload's `gpu` scale on a CUDA machine, its baseline
against the best candidate known for it, each an isolated trial run by ``infrarsi trial``.

    python bench/gpu_check.py --out DIR [--deadline-s 420] [--scale gpu]

A smoke trial at ``tiny`` first (the CUDA path end to end in seconds), then, per workload, the
baseline (the scale's knob defaults) and one candidate: bf16 with the workload's kernel
patches and a larger micro-batch. The candidate is chosen ahead, from what the CPU tables and
the catalog's priors say; no search ran on the GPU (a search there costs more than the device
time a session is lent). Each pair reports the step-time ratio, the peak memory
(``torch.cuda.max_memory_reserved``), the held-out loss of both final parameter sets (the
harness's own evaluation with the unpatched code) and the weight distance between them as a
share of what the baseline learned. A trial that cannot finish inside the deadline is not
started. Writes ``gpu_check.json`` (every record's figures) and ``gpu_check.txt`` (the table)
to ``--out``. The two-node workloads need two hosts and are left out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from infrarsi.trial import TrialRecord
from infrarsi.verify.reference import apart

# Knobs and patches of each workload's candidate: bf16, every kernel patch of its catalog that
# applies alone or together (checked at tiny on CPU), a micro-batch twice the scale's default.
PLAN: list[tuple[str, dict[str, str], list[str]]] = [
    (
        "dense-1node",
        {"precision": "bf16", "micro_batch": "16"},
        ["sdpa_attention", "fused_qkv", "fused_adamw"],
    ),
    (
        "moe-1node",
        {"precision": "bf16", "micro_batch": "16"},
        ["grouped_dispatch", "sdpa_attention", "fused_adamw"],
    ),
]
# Seconds a trial is expected to take at most, by (workload, label), to skip what cannot
# finish before the deadline (first-run guesses for one H200; the smoke is at tiny).
EXPECTED_S = {"baseline": 120.0, "candidate": 60.0, "smoke": 30.0}


@dataclass
class Result:
    """One trial's figures, as the check reports them."""

    workload: str
    label: str
    knobs: dict[str, str]
    patches: list[str]
    status: str = "not run"
    error: str | None = None
    step_time_s: float | None = None
    e2e_time_s: float | None = None
    startup_time_s: float | None = None
    peak_mem_bytes: list[int] = field(default_factory=list)
    peak_mem_source: str | None = None
    eval_loss: float | None = None
    initial_eval_loss: float | None = None
    final_loss: float | None = None
    wall_s: float | None = None
    trial_dir: str | None = None


def run_trial(res: Result, scale: str, workdir: Path, timeout_s: float) -> Result:
    """Run one trial by the CLI, as a user would, and read its record."""
    cmd = [
        sys.executable,
        "-m",
        "infrarsi",
        "trial",
        res.workload,
        "--scale",
        scale,
        "--json",
        "--workdir",
        str(workdir),
        "--timeout",
        str(int(timeout_s)),
    ]
    for k, v in res.knobs.items():
        cmd += ["--set", f"{k}={v}"]
    for p in res.patches:
        cmd += ["--patch", p]
    print("$", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s + 120)
    res.wall_s = time.monotonic() - t0
    sys.stderr.write(proc.stderr[-4000:])
    try:
        trial_dir = Path(json.loads(proc.stdout)["trial_dir"])
    except (json.JSONDecodeError, KeyError, TypeError):
        res.status, res.error = "no record", (proc.stdout + proc.stderr)[-2000:]
        return res
    _read(res, TrialRecord.load(trial_dir / "record.json"))
    return res


def _read(res: Result, rec: TrialRecord) -> None:
    """The figures the check reports, from the trial's stored record."""
    res.status, res.error, res.trial_dir = rec.status.value, rec.error, rec.trial_dir
    if rec.metrics is not None:
        m = rec.metrics
        res.step_time_s, res.e2e_time_s, res.startup_time_s = (
            m.step_time_s,
            m.e2e_time_s,
            m.startup_time_s,
        )
        res.peak_mem_bytes = [b for b in m.peak_mem_bytes if b is not None]
        res.peak_mem_source = m.peak_mem_source
        res.final_loss = m.loss[-1] if m.loss else None
    if rec.evaluation is not None:
        res.eval_loss, res.initial_eval_loss = (
            rec.evaluation.eval_loss,
            rec.evaluation.initial_eval_loss,
        )


def compare(base: Result, cand: Result) -> dict[str, Any]:
    """The candidate against the baseline: step-time ratio, memory ratio, held-out loss and
    weight distance (share of the baseline's learned update)."""
    out: dict[str, Any] = {"workload": base.workload}
    if base.status != "ok" or cand.status != "ok":
        out["note"] = f"baseline {base.status}, candidate {cand.status}"
        return out
    if base.step_time_s and cand.step_time_s:
        out["speedup_step"] = base.step_time_s / cand.step_time_s
    if base.e2e_time_s and cand.e2e_time_s:
        out["speedup_e2e"] = base.e2e_time_s / cand.e2e_time_s
    if base.peak_mem_bytes and cand.peak_mem_bytes:
        out["peak_mem_ratio"] = max(cand.peak_mem_bytes) / max(base.peak_mem_bytes)
    records = [TrialRecord.load(Path(r.trial_dir) / "record.json") for r in (cand, base)]
    out["weight_distance"] = apart(*records)  # as verify reads it: aliases, inert parameters
    return out


def table(results: list[Result], pairs: list[dict[str, Any]]) -> str:
    """The check as text: one row per trial, one per pair."""
    rows = [
        f"{'workload':12} {'label':9} {'status':8} {'step_time_s':>11} {'e2e_time_s':>10} "
        f"{'peak_mem_GiB':>12} {'eval_loss':>9}"
    ]
    for r in results:
        peak = f"{max(r.peak_mem_bytes) / 2**30:.2f}" if r.peak_mem_bytes else "-"
        rows.append(
            f"{r.workload:12} {r.label:9} {r.status:8} {_f(r.step_time_s, 4):>11} "
            f"{_f(r.e2e_time_s, 1):>10} {peak:>12} {_f(r.eval_loss, 4):>9}"
        )
    rows.append("")
    for p in pairs:
        rows.append(
            ", ".join(f"{k}={_f(v, 3) if isinstance(v, float) else v}" for k, v in p.items())
        )
    return "\n".join(rows) + "\n"


def _f(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--deadline-s", type=float, default=420.0)
    ap.add_argument("--scale", default="gpu")
    ap.add_argument("--workdir", type=Path, default=Path(".infrarsi/gpu_check"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    end = time.monotonic() + args.deadline_s
    results: list[Result] = []
    plan = [Result("dense-1node", "smoke", {"nproc": "1"}, [])]
    for workload, knobs, patches in PLAN:
        if args.scale != "gpu":  # a trial run of the check itself, on a CPU at tiny
            knobs = {"precision": knobs["precision"], "nproc": "1"}
        plan.append(Result(workload, "baseline", {}, []))
        plan.append(Result(workload, "candidate", knobs, patches))
    for res in plan:
        scale = "tiny" if res.label == "smoke" else args.scale
        left = end - time.monotonic()
        if left < EXPECTED_S[res.label]:
            res.status = "skipped"
            res.error = f"{left:.0f} s left before the deadline"
        else:
            run_trial(res, scale, args.workdir, timeout_s=left - 30)
        results.append(res)
        print(json.dumps({k: v for k, v in asdict(res).items() if k != "error"}), flush=True)
        _write(args.out, results, [])
    pairs = [compare(b, c) for b, c in zip(results[1::2], results[2::2], strict=True)]
    _write(args.out, results, pairs)
    print(table(results, pairs))
    return 0 if all(r.status == "ok" for r in results) else 1


def _write(out: Path, results: list[Result], pairs: list[dict[str, Any]]) -> None:
    (out / "gpu_check.json").write_text(
        json.dumps({"results": [asdict(r) for r in results], "pairs": pairs}, indent=1)
    )
    (out / "gpu_check.txt").write_text(table(results, pairs))


if __name__ == "__main__":
    sys.exit(main())
