"""What running a trial through Ray costs over running it here: the same candidates of
dense-1node at tiny (nproc 1) through the local executor and through the Ray executor on a
two-node local cluster (``ray.cluster_utils.Cluster``), interleaved (local, Ray, local, ...).

    .venv/bin/python bench/executors.py [--trials 6]   # -> bench/results/executors.json

Two measurements: the per-trial overhead of Ray over local (one trial at a time on each, in
pairs: the median of paired wall-time differences — shipping the workload and the trial's
folder, the placement group, the task), and trials per hour over the same candidates run
locally one at a time and on Ray with ``--parallel`` of them in flight (one per node, as the
run loop keeps them). The two "nodes" of the local cluster share this machine's cores, so
the parallel figure is what two nodes give here, not what two machines would.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from infrarsi.executors import LocalExecutor, TrialRequest
from infrarsi.host import host_fingerprint

RESULTS = Path(__file__).resolve().parent / "results" / "executors.json"
CANDIDATES = [{"nproc": 1, "micro_batch": mb, "precision": "fp32"} for mb in (1, 2, 4)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=6, help="trials per executor")
    parser.add_argument("--parallel", type=int, default=2, help="Ray trials in flight")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    from ray.cluster_utils import Cluster

    from infrarsi.executors.ray_executor import RayExecutor

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for name in ("node_a", "node_b"):
        cluster.add_node(num_cpus=2, resources={name: 1})
    cluster.wait_for_nodes()
    root = Path(tempfile.mkdtemp(prefix="infrarsi-executors-"))
    executors = {
        "local": LocalExecutor(root / "local"),
        "ray": RayExecutor(root / "ray", cluster.address),
    }
    walls: dict[str, list[float]] = {"local": [], "ray": []}
    nodes = set()
    try:
        throughput = {
            "local_trials_per_h": _per_hour(executors["local"], args.trials, 1),
            "ray_trials_per_h": _per_hour(executors["ray"], args.trials, args.parallel),
        }
        for i in range(args.trials):
            knobs = CANDIDATES[i % len(CANDIDATES)]
            for kind in ("local", "ray") if i % 2 == 0 else ("ray", "local"):
                t0 = time.perf_counter()
                record = executors[kind].run(
                    TrialRequest(workload="dense-1node", scale="tiny", knobs=knobs)
                )
                walls[kind].append(time.perf_counter() - t0)
                nodes.add(record.node) if kind == "ray" else None
                print(
                    f"{kind} {knobs}: {record.status.value} {walls[kind][-1]:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()
    overhead = [r - loc for r, loc in zip(walls["ray"], walls["local"])]
    result = {
        **throughput,
        "ray_overhead_s_per_trial": statistics.median(overhead),
        "ray_overhead_s_spread": [min(overhead), max(overhead)],
        "ray_parallel": args.parallel,
        "ray_nodes_used": len(nodes),
        "trials": args.trials,
        "local_wall_s": walls["local"],
        "ray_wall_s": walls["ray"],
        "fingerprint": host_fingerprint(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(
        json.dumps({k: v for k, v in result.items() if not k.endswith("wall_s")}), file=sys.stderr
    )
    return 0


def _per_hour(executor, trials: int, parallel: int) -> float:
    """Trials per hour over ``trials`` candidates with up to ``parallel`` in flight."""
    todo = [
        TrialRequest(workload="dense-1node", scale="tiny", knobs=CANDIDATES[i % len(CANDIDATES)])
        for i in range(trials)
    ]
    flying, t0 = [], time.perf_counter()
    while todo or flying:
        while todo and len(flying) < parallel:
            flying.append(executor.submit(todo.pop(0)))
        done = [h for h in flying if executor.poll(h) is not None]
        flying = [h for h in flying if h not in done]
        time.sleep(0.1 if not done else 0)
    return 3600 * trials / (time.perf_counter() - t0)


if __name__ == "__main__":
    sys.exit(main())
