"""What the observer costs a step: the bundled dense workload with and without the rank's
observer (``sandbox/_hooks/infrarsi_observe.py``: optimizer-step hooks, backward roots, the
optimizer's parameters saved twice), interleaved and repeated.

    .venv/bin/python bench/observer_cost.py --pairs 10

First its own work, timed in one process where nothing else varies (``hook_cost``: the hooks
and the record of one optimizer step of four micro-steps — written to its file alone, and also
sent on the harness's channel as ``launch.metrics: observed`` has it — and the two saves of the
``tiny`` model's parameters a trial makes): this is what resolves a 1% share, which whole
trials on a shared 2-core host (a 10% spread per pair) cannot. Then whole trials of
dense-1node at ``steady`` (the ``tiny`` model over 48 steps, two ranks): each pair runs the
baseline without the observer and with it (weights saved by it too), in alternating order, at
one seed; the steady step is the harness's (its lines' arrival, the median of the steady
steps). Reported: the ratio with / without per pair, its median and a bootstrap interval of the
median; ``bench/results/observer-cost.json`` is keyed by the host's fingerprint and written
after every pair (``--pairs`` is the total wanted: a killed run resumes).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
from pathlib import Path

from infrarsi.host import host_fingerprint
from infrarsi.trial import prepare, run_trial
from infrarsi.trial.launch import OBSERVE, OBSERVE_WEIGHTS, OBSERVED
from infrarsi.trial.spec import challenge_seed
from infrarsi.trial.watch import MetricsChannel
from infrarsi.workloads import find

SOCKET = "INFRARSI_METRICS_SOCKET"
RESULTS = Path(__file__).parent / "results" / "observer-cost.json"
WORKLOAD, SCALE = "dense-1node", "steady"
# the observer on, its records and the optimizer's parameters in the trial's own folder (the
# workload saves its own parameters where the harness reads them: these are the observer's)
OBSERVER = {OBSERVE: OBSERVED, OBSERVE_WEIGHTS: "observer-weights"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    args = parser.parse_args()
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    mine = saved.setdefault(host_fingerprint(), {"pairs": []})
    mine["hooks"] = hook_cost()
    print(f"the observer's own work: {mine['hooks']}", flush=True)
    RESULTS.write_text(json.dumps(saved, indent=2) + "\n")  # kept before any pair runs
    manifest = find(WORKLOAD)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        while len(mine["pairs"]) < args.pairs:
            seed, n = challenge_seed(), len(mine["pairs"])
            steps: dict[str, float | None] = {}
            for observed in (n % 2 == 1, n % 2 == 0):  # alternating order
                where = folder / f"pair{n}-{'on' if observed else 'off'}"
                env = OBSERVER if observed else {}  # in the trial's own folder
                record = run_trial(prepare(manifest, SCALE, seed=seed, extra_env=env), where)
                assert record.status.value == "ok", record.error
                steps["on" if observed else "off"] = record.metrics.harness_step_time_s
            mine["pairs"].append({**steps, "ratio": steps["on"] / steps["off"]})
            ratios = [p["ratio"] for p in mine["pairs"]]
            mine["summary"] = {
                "pairs": len(ratios),
                "ratio_median": statistics.median(ratios),
                "ratio_median_interval_95": _interval(ratios),
                "host": host_fingerprint(),
                "command": "bench/observer_cost.py --pairs N",
            }
            print(f"pair {len(ratios)}: with / without {ratios[-1]:.3f}", flush=True)
            RESULTS.write_text(json.dumps(saved, indent=2) + "\n")


def hook_cost(steps: int = 2000, micro: int = 4) -> dict[str, float]:
    """The observer's own work per optimizer step, timed in one process where nothing else
    varies: ``micro`` backward roots, the step's two hooks and its record written; and the two
    saves of the dense workload's ``tiny`` parameters (once each a trial)."""
    import sys
    import time

    import torch

    from infrarsi.sandbox import HOOKS_DIR

    sys.path.insert(0, str(HOOKS_DIR))
    import infrarsi_observe as hook

    sys.path.pop(0)
    sys.path.insert(0, str(find(WORKLOAD).root))
    from model import GPT, GPTConfig

    sys.path.pop(0)
    model = GPT(GPTConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    roots = [torch.tensor(1.5, requires_grad=True) * 2 for _ in range(micro)]
    out: dict[str, float] = {"micro_steps": micro}
    with tempfile.TemporaryDirectory() as tmp:
        channel = MetricsChannel(Path(tmp))  # the harness's channel, read as a trial's is
        channel.start()
        try:
            for key, report in (("hooks_per_step_s", None), ("reported_per_step_s", channel)):
                report = hook._Report(channel.env()[SOCKET]) if report else None
                observer = hook._Observer(f"{tmp}/{key}.jsonl", f"{tmp}/weights", None, report)
                observer.before_step(optimizer, (), {})  # the first: its start record, a save
                t0 = time.perf_counter()
                for _ in range(steps):
                    for root in roots:
                        observer.backward_root(root)
                    observer.before_step(optimizer, (), {})
                    observer.after_step(optimizer, (), {})
                out[key] = (time.perf_counter() - t0) / steps
        finally:
            channel.stop()
        t0 = time.perf_counter()
        observer._save("initial")
        observer._save("final")
        out["two_saves_s"] = time.perf_counter() - t0
    return out


def _interval(ratios: list[float], draws: int = 2000) -> list[float]:
    """A percentile bootstrap interval of the median ratio."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return [medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]]


if __name__ == "__main__":
    main()
