"""What verification costs Apply: the reference runs a candidate needs besides its rounds.

    .venv/bin/python bench/verification_cost.py --rounds 3

Runs Apply's interleaved rounds (``apply.rounds.Rounds``, challenge seed per round) on
dense-1node at tiny with three candidates — knobs only (another micro-batch), a patch with
another micro-batch, a patch with bf16 — and prints, per candidate, its measurements and the
reference runs measured for it, in trials and seconds. Writes
``bench/results/verification-cost.json`` keyed by the host's fingerprint.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from infrarsi.apply.rounds import BASELINE, Rounds
from infrarsi.executors import LocalExecutor
from infrarsi.host import host_fingerprint
from infrarsi.init import make_contract, read_instruction
from infrarsi.records import CandidateResult
from infrarsi.workloads import find, knobs

RESULTS = Path(__file__).parent / "results"
CANDIDATES = [
    CandidateResult(label="knobs-only", knobs={"micro_batch": 4}, patches=[]),
    CandidateResult(label="patch+split", knobs={"micro_batch": 4}, patches=["sdpa_attention"]),
    CandidateResult(label="patch+bf16", knobs={"precision": "bf16"}, patches=["sdpa_attention"]),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    dense = find("dense-1node")
    contract = make_contract(dense, "tiny", "cut time", read_instruction("cut time", []))
    with tempfile.TemporaryDirectory() as tmp:
        rounds = Rounds(
            contract, Path(tmp), LocalExecutor(Path(tmp)), CANDIDATES, knobs.baseline(dense, "tiny")
        )
        measured = rounds.run(args.rounds)
        references = list(rounds.references.runs.values())
    out = {}
    for c in [BASELINE] + [c.label for c in CANDIDATES]:
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
    saved.setdefault(host_fingerprint(), {})[f"dense-1node@tiny rounds={args.rounds}"] = out
    path.write_text(json.dumps(saved, indent=2) + "\n")


if __name__ == "__main__":
    main()
