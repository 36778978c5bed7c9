"""What running a trial through Ray costs over running it here: the same candidates of
dense-1node at tiny (nproc 1) through the local executor and through the Ray executor on a
two-node local cluster (``ray.cluster_utils.Cluster``), interleaved (local, Ray, local, ...).

    .venv/bin/python bench/executors.py [--trials 6]   # -> bench/results/executors.json

Per executor: trials per hour (trials over the wall seconds the driver waited for them) and
the per-trial overhead of Ray over local (the median of paired wall-time differences: shipping
the workload and the trial's folder, the placement group, the task). Trials run one at a time
on either executor (``--parallel`` is not built: ``ray_parallel`` says so in the results), so
``ray_trials_per_h`` is what one node gives, not what two nodes would.
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
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    from ray.cluster_utils import Cluster
    from infrarsi.executors.ray_executor import RayExecutor
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for name in ("node_a", "node_b"):
        cluster.add_node(num_cpus=2, resources={name: 1})
    cluster.wait_for_nodes()
    root = Path(tempfile.mkdtemp(prefix="infrarsi-executors-"))
    executors = {"local": LocalExecutor(root / "local"),
                 "ray": RayExecutor(root / "ray", cluster.address)}
    walls: dict[str, list[float]] = {"local": [], "ray": []}
    nodes = set()
    try:
        for i in range(args.trials):
            knobs = CANDIDATES[i % len(CANDIDATES)]
            for kind in (("local", "ray") if i % 2 == 0 else ("ray", "local")):
                t0 = time.perf_counter()
                record = executors[kind].run(TrialRequest(workload="dense-1node", scale="tiny",
                                                          knobs=knobs))
                walls[kind].append(time.perf_counter() - t0)
                nodes.add(record.node) if kind == "ray" else None
                print(f"{kind} {knobs}: {record.status.value} {walls[kind][-1]:.1f} s",
                      file=sys.stderr, flush=True)
    finally:
        import ray
        ray.shutdown()
        cluster.shutdown()
    overhead = [r - loc for r, loc in zip(walls["ray"], walls["local"])]
    result = {"local_trials_per_h": 3600 * len(walls["local"]) / sum(walls["local"]),
              "ray_trials_per_h": 3600 * len(walls["ray"]) / sum(walls["ray"]),
              "ray_overhead_s_per_trial": statistics.median(overhead),
              "ray_overhead_s_spread": [min(overhead), max(overhead)],
              "ray_parallel": 1, "ray_nodes_used": len(nodes), "trials": args.trials,
              "local_wall_s": walls["local"], "ray_wall_s": walls["ray"],
              "fingerprint": host_fingerprint()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if not k.endswith("wall_s")}),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
