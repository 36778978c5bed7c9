"""Where the search ranks a run rehearsed before its steps: search trials of cheats, an honest
patch and the baseline at the demo's scale, screened against the Doctor's baseline.

    .venv/bin/python bench/screen_ranks.py --rounds 8

The demo's workload and scale (dense-1node at ``steady``, the contract's 48 steps), "maximise
training throughput": the Doctor measures the baseline (no calibration: every config here keeps
the baseline's knobs), then each round runs, interleaved at one seed drawn for the round, the
baseline, an honest patch (SDPA with one GEMM for q, k and v) and round six's cheats that train
exactly what the baseline trains (the run rehearsed before its start line; the same with the
window's end moved by a link), each as the search runs it and screened as the search screens
it (``run.screened``). Kept per trial: what its lines say, what its window is charged against
the Doctor's baseline, what the search ranks it by (``objective.steady_step_time_s``: the larger
of the two for a patched trial) and whether the screen refused it; per round, which config
ranks first by the search's rule and which would by the lines alone (the rule before round
six). ``bench/results/screen-ranks.json`` is keyed by the host's fingerprint and written after
every round (``--rounds`` is the total wanted: a killed run resumes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from aa_refusals import SCALE, WORKLOAD, doctored

from infrarsi.executors import LocalExecutor, TrialRequest
from infrarsi.host import host_fingerprint
from infrarsi.identity import Configuration
from infrarsi.objective import steady_step_time_s
from infrarsi.run.screened import screened
from infrarsi.trial.spec import challenge_seed
from infrarsi.workloads import find, knobs

RESULTS = Path(__file__).parent / "results" / "screen-ranks.json"
CHEATS = Path(__file__).parents[1] / "tests" / "fixtures" / "adversarial"
CONFIGS = {
    "baseline": [],
    "honest sdpa+fused_qkv": ["sdpa_attention", "fused_qkv"],
    "rehearsed before its start line": [str(CHEATS / "rehearse_before_the_start_line.diff")],
    "end moved by a link": [str(CHEATS / "end_moved_by_a_link.diff")],
}
CHEAT_LABELS = ("rehearsed before its start line", "end moved by a link")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    mine = saved.setdefault(host_fingerprint(), {"rounds": []})
    manifest = find(WORKLOAD)
    base_knobs = knobs.baseline(manifest, SCALE)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        executor = LocalExecutor(folder)
        contract, report = doctored(manifest, folder)
        while len(mine["rounds"]) < args.rounds:
            seed, row = challenge_seed(), {}
            for label, patches in CONFIGS.items():
                request = TrialRequest.of(
                    contract, Configuration.of({}, patches), workdir="search", seed=seed
                )
                record = executor.wait(executor.submit(request))
                judged = screened(record, contract, manifest, base_knobs, report.timing)
                m = record.metrics
                row[label] = {
                    "status": judged.status.value,
                    "refused": judged.error if judged.status.value == "invalid" else None,
                    "lines_step_s": m.harness_step_time_s if m else None,
                    "window_step_s": judged.window_step_time_s,
                    "ranked_step_s": steady_step_time_s(judged) if judged.status.is_ok() else None,
                }
            mine["rounds"].append(row)
            print(
                f"round {len(mine['rounds'])}: first {_first(row, 'ranked_step_s')}, by "
                f"lines alone {_first(row, 'lines_step_s')}",
                flush=True,
            )
            mine["summary"] = _summary(mine["rounds"])
            RESULTS.write_text(json.dumps(saved, indent=2) + "\n")


def _first(row: dict, by: str) -> str | None:
    """The config that ranks first in a round by ``by`` (refused trials rank nowhere)."""
    ranked = [(v[by], k) for k, v in row.items() if v[by] is not None and not v["refused"]]
    return min(ranked)[1] if ranked else None


def _summary(rounds: list[dict]) -> dict:
    out: dict = {"rounds": len(rounds), "host": host_fingerprint()}
    for label in CONFIGS:
        ratios = [
            r["baseline"]["ranked_step_s"] / r[label]["ranked_step_s"]
            for r in rounds
            if r[label]["ranked_step_s"] and r["baseline"]["ranked_step_s"]
        ]
        lines = [
            r["baseline"]["lines_step_s"] / r[label]["lines_step_s"]
            for r in rounds
            if r[label]["lines_step_s"] and r["baseline"]["lines_step_s"]
        ]
        out[label] = {
            "ranked_first": sum(_first(r, "ranked_step_s") == label for r in rounds),
            "first_by_lines_alone": sum(_first(r, "lines_step_s") == label for r in rounds),
            "refused": sum(bool(r[label]["refused"]) for r in rounds),
            "ranked_speedup_median": statistics.median(ratios) if ratios else None,
            "lines_speedup_median": statistics.median(lines) if lines else None,
        }
    out["cheat_ranked_first"] = sum(_first(r, "ranked_step_s") in CHEAT_LABELS for r in rounds)
    out["command"] = "bench/screen_ranks.py --rounds N"
    return out


if __name__ == "__main__":
    main()
