"""How often the harness's clock refuses an unchanged run: A/A pairs under a throughput objective.

    .venv/bin/python bench/aa_refusals.py --pairs 40

The demo's workload and scale (dense-1node at ``steady``), "maximise training throughput": the
Doctor measures the baseline (its timed steps, the noise its checks read), then each pair is
what Apply and the search would judge of a patch that changes nothing (a comment added to
``model.py``):

- Apply: the baseline and the comment-only patch at the Doctor's timed steps, at one challenge
  seed drawn for the pair, interleaved; ``verify`` judges the patch against the baseline (the
  numerical evidence, the reported times, and the harness's clock: a claimed saving the window
  does not show, an early start line, a grown warm-up). Also kept: the charged step's ratio to
  the baseline's (the A/A noise of what Apply compares).
- The search: the comment-only patch at the contract's steps, screened against the Doctor's
  baseline (``run.screened``).

Refusals are counted per pair with their reasons; the file
``bench/results/aa-refusals.json`` is keyed by the host's fingerprint and written after every
pair, so a killed run resumes where it stopped (``--pairs`` is the total wanted).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from infrarsi.apply.rounds import harness_time
from infrarsi.doctor import run_doctor, sealed_contract
from infrarsi.executors import LocalExecutor, TrialRequest
from infrarsi.host import host_fingerprint
from infrarsi.init import make_contract, read_instruction
from infrarsi.run.screened import screened
from infrarsi.trial.spec import challenge_seed
from infrarsi.verify import verify
from infrarsi.workloads import find, knobs

RESULTS = Path(__file__).parent / "results" / "aa-refusals.json"
INSTRUCTION = "maximise training throughput, keep the loss within 1%"
WORKLOAD, SCALE = "dense-1node", "steady"


def comment_only(manifest, folder: Path) -> Path:
    """A diff that adds one comment line to the workload's model.py: it changes nothing."""
    import difflib

    original = (manifest.root / "model.py").read_text().splitlines(keepends=True)
    patched = ["# an unchanged run: this line is the whole patch\n", *original]
    text = "".join(difflib.unified_diff(original, patched, "a/model.py", "b/model.py"))
    path = folder / "comment_only.diff"
    path.write_text("diff --git a/model.py b/model.py\n" + text)
    return path


def doctored(manifest, folder: Path, calibrate: bool = False):
    """The demo's throughput contract on ``manifest`` at ``SCALE``, doctored (three baseline
    runs, tolerances calibrated only when asked) and sealed; (contract, the Doctor's report)."""
    contract = make_contract(
        manifest, SCALE, INSTRUCTION, read_instruction(INSTRUCTION, ["model.py"])
    )
    report = run_doctor(contract, 3, folder / "doctor", calibrate_tolerances=calibrate)
    return sealed_contract(contract, report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=40)
    args = parser.parse_args()
    fingerprint = host_fingerprint()
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    mine = saved.setdefault(fingerprint, {"pairs": []})
    manifest = find(WORKLOAD)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        executor = LocalExecutor(folder)
        contract, report = doctored(manifest, folder)
        mine["timed_steps"] = contract.noise.timed_steps
        mine["doctor_timing"] = report.timing.model_dump() if report.timing else None
        patch = str(comment_only(manifest, folder))
        base_knobs = knobs.baseline(manifest, SCALE)
        while len(mine["pairs"]) < args.pairs:
            t0 = time.monotonic()
            mine["pairs"].append(_pair(contract, report, executor, patch, base_knobs, manifest))
            pair = mine["pairs"][-1]
            refused = "; ".join(pair["apply_reasons"]) or "ok"
            print(
                f"pair {len(mine['pairs'])}/{args.pairs}: apply {refused}, ratio "
                f"{pair['charged_ratio'] or 0:.3f}; search {pair['search_error'] or 'ok'} "
                f"({time.monotonic() - t0:.0f} s)",
                flush=True,
            )
            _summarise(mine)
            RESULTS.write_text(json.dumps(saved, indent=2) + "\n")


def _pair(contract, report, executor, patch, base_knobs, manifest) -> dict:
    seed = challenge_seed()

    def run(patches, steps):
        return executor.run(
            TrialRequest(
                workload=WORKLOAD,
                scale=SCALE,
                knobs={},
                patches=patches,
                contract_hash=contract.contract_hash,
                seed=seed,
                steps=steps,
            )
        )

    base, cand = run([], contract.noise.timed_steps), run([patch], contract.noise.timed_steps)
    verdict = verify(contract, base, cand)
    charged = harness_time(cand, base, contract.noise)
    searched = screened(run([patch], None), contract, manifest, base_knobs, report.timing)
    return {
        "apply_reasons": verdict.reasons,
        "charged_ratio": (base.metrics.harness_step_time_s / charged) if charged else None,
        "search_error": searched.error if searched.status.value == "invalid" else None,
        "e2e_s": [base.metrics.e2e_time_s, cand.metrics.e2e_time_s],
    }


def _summarise(mine: dict) -> None:
    pairs = mine["pairs"]
    ratios = [p["charged_ratio"] for p in pairs if p["charged_ratio"]]
    mine["summary"] = {
        "pairs": len(pairs),
        "apply_refused": sum(bool(p["apply_reasons"]) for p in pairs),
        "search_refused": sum(bool(p["search_error"]) for p in pairs),
        "charged_ratio_median": statistics.median(ratios) if ratios else None,
        "charged_ratio_sd": statistics.stdev(ratios) if len(ratios) > 1 else None,
        "host": host_fingerprint(),
        "command": "bench/aa_refusals.py --pairs N",
    }


if __name__ == "__main__":
    main()
