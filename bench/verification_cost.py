"""What verification costs Apply: the reference runs a candidate needs besides its rounds.

    .venv/bin/python bench/verification_cost.py --rounds 3
    .venv/bin/python bench/verification_cost.py --rounds 3 --throughput

With ``--throughput``: the demo's contract (dense-1node at ``steady``, "maximise training
throughput"), the Doctor run first (no calibration) for its timed steps; the candidates are a
patch on the baseline's knobs (SDPA + one QKV GEMM), a knobs-only one and a patch with other
knobs, and Apply times every trial over the timed steps (a patched candidate is charged by the
harness's clock). Printed besides: what one trial costs at the timed steps and at the
contract's (the Doctor's baseline runs), so the price of the clock per candidate and round.

Runs Apply's interleaved rounds (``apply.rounds.Rounds``, challenge seed per round) on
dense-1node at tiny with three candidates — knobs only (another micro-batch), a patch with
another micro-batch, a patch with bf16 — and prints, per candidate, its measurements and the
reference runs measured for it, in trials and seconds. Writes
``bench/results/verification-cost.json`` keyed by the host's fingerprint.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from infrarsi.apply.rounds import BASELINE, Rounds
from infrarsi.doctor import run_doctor, sealed_contract
from infrarsi.executors import LocalExecutor
from infrarsi.host import host_fingerprint
from infrarsi.init import make_contract, read_instruction
from infrarsi.records import CandidateResult
from infrarsi.workloads import find, knobs

RESULTS = Path(__file__).parent / "results"
THROUGHPUT_INSTRUCTION = "maximise training throughput, keep the loss within 1%"
CANDIDATES = [
    CandidateResult(label="knobs-only", knobs={"micro_batch": 4}, patches=[]),
    CandidateResult(label="patch+split", knobs={"micro_batch": 4}, patches=["sdpa_attention"]),
    CandidateResult(label="patch+bf16", knobs={"precision": "bf16"}, patches=["sdpa_attention"]),
]


THROUGHPUT = [
    CandidateResult(label="patch", knobs={}, patches=["sdpa_attention", "fused_qkv"]),
    CandidateResult(label="knobs-only", knobs={"micro_batch": 4}, patches=[]),
    CandidateResult(label="patch+split", knobs={"micro_batch": 4}, patches=["sdpa_attention"]),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--throughput", action="store_true")
    args = parser.parse_args()
    dense = find("dense-1node")
    scale, instruction = (
        ("steady", THROUGHPUT_INSTRUCTION) if args.throughput else ("tiny", "cut time")
    )
    contract = make_contract(dense, scale, instruction, read_instruction(instruction, []))
    candidates = THROUGHPUT if args.throughput else CANDIDATES
    extra = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.throughput:
            report = run_doctor(contract, 3, Path(tmp) / "doctor", calibrate_tolerances=False)
            contract, report = sealed_contract(contract, report)
            base_costs = [t.cost_s for t in report.trials if t.label.startswith("baseline")]
            extra = {
                "timed_steps": contract.noise.timed_steps,
                "contract_steps": contract.invariants.steps,
                "trial_s_at_contract_steps": round(statistics.median(base_costs), 2),
            }
        rounds = Rounds(
            contract, Path(tmp), LocalExecutor(Path(tmp)), candidates, knobs.baseline(dense, scale)
        )
        measured = rounds.run(args.rounds)
        references = list(rounds.references.runs.values())
    if extra:
        extra["trial_s_at_timed_steps"] = round(statistics.median(m.cost_s for m in measured), 2)
        print(json.dumps(extra))
    out: dict = {"costs": extra} if extra else {}
    for c in [BASELINE] + [c.label for c in candidates]:
        mine = [m for m in measured if m.label == c]
        refs = [r for r in references if c in r.for_labels]
        out[c] = {
            "measurements": len(mine),
            "measured_s": round(sum(m.cost_s for m in mine), 1),
            "valid": [m.valid for m in mine],
            "reference_trials": len(refs),
            "reference_s": round(sum(r.cost_s for r in refs), 1),
        }
        print(f"{c:12} {json.dumps(out[c])}")
    path = RESULTS / "verification-cost.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    key = f"dense-1node@{scale} rounds={args.rounds}" + (" throughput" if args.throughput else "")
    saved.setdefault(host_fingerprint(), {})[key] = out
    path.write_text(json.dumps(saved, indent=2) + "\n")


if __name__ == "__main__":
    main()
