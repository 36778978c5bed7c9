"""How far honest changes and cheats move the weights, per precision: the floors behind the
differential verification rule (``infrarsi.verify.reference``).

    .venv/bin/python bench/precision_floors.py --scale tiny

Runs each reference workload at fp32 and bf16 twice (the re-run floors), an honest catalog patch
at both precisions, and (dense) two cheats: a tanh GELU (an approximation an LLM would honestly
propose, paired with bf16 by the search) and a patch that closes the loop's bf16 autocast
region (fp32 under a bf16 label). Prints each distance as a share of what the baseline learned,
``|W_x - W_y| / |W_y - W_0|``, and writes ``bench/results/precision-floors.json`` keyed by the
host's fingerprint.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from infrarsi.host import host_fingerprint
from infrarsi.trial import TrialRecord, prepare, run_trial
from infrarsi.verify.evidence import load_params, weight_distance
from infrarsi.workloads import find

RESULTS = Path(__file__).parent / "results"
CHEATS = Path(__file__).parent.parent / "tests" / "fixtures" / "adversarial"
PLAN = {
    "dense-1node": {
        "honest": "sdpa_attention",
        "cheats": {
            "tanh_gelu": CHEATS / "tanh_gelu.diff",
            "fp32_under_a_bf16_label": CHEATS / "fp32_under_a_bf16_label.diff",
        },
    },
    "moe-1node": {"honest": "sdpa_attention", "cheats": {}},
}


def distance(x: TrialRecord, y: TrialRecord) -> float:
    """``x``'s final parameters from ``y``'s, as a share of what ``y`` learned."""
    assert x.evaluation and y.evaluation, (x.error, y.error)
    wx, wy = load_params(x.evaluation.final_weights), load_params(y.evaluation.final_weights)
    w0 = load_params(y.evaluation.initial_weights)
    assert wx is not None and wy is not None and w0 is not None
    return weight_distance(wy, wx, w0, set(y.evaluation.inert_params))


def measure(name: str, scale: str, workdir: Path) -> dict[str, float]:
    manifest, plan = find(name), PLAN[name]

    def run(precision: str, *patches: str) -> TrialRecord:
        record = run_trial(
            prepare(manifest, scale, {"precision": precision}, list(patches)), workdir
        )
        assert record.status.is_ok(), record.error
        return record

    fp32, fp32_again, bf16, bf16_again = run("fp32"), run("fp32"), run("bf16"), run("bf16")
    honest32, honest16 = run("fp32", plan["honest"]), run("bf16", plan["honest"])
    bf16_from_fp32 = distance(bf16, fp32)
    out = {
        "rerun_fp32": distance(fp32_again, fp32),
        "rerun_bf16": distance(bf16_again, bf16),
        "bf16_reference_from_fp32": bf16_from_fp32,
        "honest_patch_at_fp32": distance(honest32, fp32),
        "honest_patch_in_bf16": distance(honest16, bf16),
        "honest_bf16_from_its_fp32_share": distance(honest16, honest32) / bf16_from_fp32,
    }
    for cheat, diff in plan["cheats"].items():
        at32, at16 = run("fp32", str(diff)), run("bf16", str(diff))
        out[f"{cheat}_at_fp32"] = distance(at32, fp32)
        out[f"{cheat}_in_bf16"] = distance(at16, bf16)
        out[f"{cheat}_bf16_from_its_fp32_share"] = distance(at16, at32) / bf16_from_fp32
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="tiny")
    args = parser.parse_args()
    path = RESULTS / "precision-floors.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    host = saved.setdefault(host_fingerprint(), {})
    with tempfile.TemporaryDirectory() as tmp:
        for name in PLAN:
            host[f"{name}@{args.scale}"] = found = measure(name, args.scale, Path(tmp))
            for key, value in found.items():
                print(f"{name:12} {key:40} {value:.2e}")
            path.write_text(json.dumps(saved, indent=2) + "\n")


if __name__ == "__main__":
    main()
