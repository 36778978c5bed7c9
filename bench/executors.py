"""What running trials on Ray across two hosts gives over running them here: the same
candidates of dense-1node at tiny (one rank) through

- ``local``: the local executor, one trial at a time, on the whole machine;
- ``pinned``: two local trials at once, each slot pinned to a core of its own (the best this
  machine does without a cluster);
- ``ray``: the Ray executor with two trials in flight on the two-host fixture
  (``two_hosts.py``: each host a network namespace with its own address, one core, a private
  file root; the head and this driver beside them),

after two uncounted trials per mode (Ray's slots are made once per run and kept), in rounds
(local, ray, pinned, then again in the opposite order), trials per hour over each mode's
trials; and the per-trial overhead of Ray: a trial on one host against a local trial on
the same core, alternated, the median of the paired wall-time differences (shipping the
workload and the trial's folder, the placement group, the task). The driver's and the head's
CPU time over the Ray trials is reported beside.

    .venv/bin/python bench/executors.py [--trials 6] [--rounds 2]   # -> results/executors.json

Needs root (``two_hosts.why_not()`` says what is missing). Keep other work off the machine
while it runs: the modes are compared by wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import two_hosts  # noqa: E402

from infrarsi.executors import LocalExecutor, TrialRequest  # noqa: E402
from infrarsi.host import host_fingerprint  # noqa: E402
from infrarsi.trial import TrialRecord, TrialStatus, run_trial  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "executors.json"
CANDIDATES = [{"nproc": 1, "micro_batch": mb, "precision": "fp32"} for mb in (1, 2, 4)]


def requests(trials: int, offset: int = 0) -> list[TrialRequest]:
    return [
        TrialRequest(
            workload="dense-1node",
            scale="tiny",
            knobs=CANDIDATES[(offset + i) % len(CANDIDATES)],
            evaluate=False,
        )
        for i in range(trials)
    ]


class PinnedSlots:
    """Local trials, ``len(cores)`` at once, each slot's trials on a core of its own (the
    thread that launches a trial sets its CPU affinity; the trial's processes inherit it)."""

    def __init__(self, root: Path, cores: list[int]) -> None:
        self.local, self.cores = LocalExecutor(root), cores

    def run_all(self, todo: list[TrialRequest]) -> list[TrialRecord]:
        queue, done, lock = list(todo), [], threading.Lock()

        def slot(core: int) -> None:
            os.sched_setaffinity(0, {core})  # this thread only
            while True:
                with lock:
                    if not queue:
                        return
                    request = queue.pop(0)
                record = run_trial(self.local.resolve(request), self.local.root / "trials")
                with lock:
                    done.append(record)

        threads = [threading.Thread(target=slot, args=(c,)) for c in self.cores]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return done


def in_flight(executor, todo: list[TrialRequest], parallel: int) -> list[TrialRecord]:
    """Every request through ``executor`` with up to ``parallel`` in flight."""
    todo, flying, done = list(todo), [], []
    while todo or flying:
        while todo and len(flying) < parallel:
            flying.append(executor.submit(todo.pop(0)))
        for handle in list(flying):
            record = executor.poll(handle)
            if record is not None:
                flying.remove(handle)
                done.append(record)
        time.sleep(0.02)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=6, help="trials per mode and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=6, help="paired trials for the overhead")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    reason = two_hosts.why_not()
    if reason:
        print(f"bench/executors.py: {reason}", file=sys.stderr)
        return 2
    import ray

    from infrarsi.executors.ray_executor import RayExecutor, release_idle

    root = Path(tempfile.mkdtemp(prefix="infrarsi-executors-"))
    cores = sorted(os.sched_getaffinity(0))[:2]
    with two_hosts.TwoHosts.start(cores=[[c] for c in cores]) as hosts:
        ray.init(address=hosts.address, namespace="infrarsi", log_to_driver=False)
        modes = {
            "local": lambda todo: in_flight(LocalExecutor(root / "local"), todo, 1),
            "pinned": PinnedSlots(root / "pinned", cores).run_all,
            "ray": lambda todo: in_flight(RayExecutor(root / "ray", hosts.address), todo, 2),
        }
        for mode in modes:  # warm: Ray's slots (a placement group and an agent per host, kept
            # for the run's trials) made, files cached; not counted
            _check(f"{mode} warm-up", modes[mode](requests(2)))
        walls = {m: 0.0 for m in modes}
        counts = {m: 0 for m in modes}
        rounds: dict[str, list[float]] = {m: [] for m in modes}  # each round's trials per hour
        ray_hosts: set[str] = set()
        cpu = {"driver_cpu_s": 0.0, "head_cpu_s": 0.0}
        for r in range(args.rounds):
            order = ["local", "ray", "pinned"]
            for mode in order if r % 2 == 0 else order[::-1]:
                cpu0, head0, t0 = time.process_time(), hosts.overhead_cpu_s(), time.perf_counter()
                records = modes[mode](requests(args.trials, r))
                walls[mode] += time.perf_counter() - t0
                rounds[mode].append(3600 * len(records) / (time.perf_counter() - t0))
                counts[mode] += len(records)
                _check(mode, records)
                if mode == "ray":
                    cpu["driver_cpu_s"] += time.process_time() - cpu0
                    cpu["head_cpu_s"] += hosts.overhead_cpu_s() - head0
                    ray_hosts |= {rec.hosts[0] for rec in records}
                rate = 3600 * counts[mode] / walls[mode]
                print(f"round {r} {mode}: {rate:.0f} trials/h so far", file=sys.stderr, flush=True)
        release_idle()
        overhead = _overhead(root, hosts, cores[0], args.pairs)
        described = hosts.describe()
        ray.shutdown()
    per_h = {m: 3600 * counts[m] / walls[m] for m in modes}
    result = {
        "local_trials_per_h": per_h["local"],
        "ray_trials_per_h": per_h["ray"],
        "local_pinned_parallel_trials_per_h": per_h["pinned"],
        "ray_over_local": per_h["ray"] / per_h["local"],
        "ray_over_local_pinned_parallel": per_h["ray"] / per_h["pinned"],
        "ray_overhead_s_per_trial": statistics.median(overhead),
        "ray_overhead_s_spread": [min(overhead), max(overhead)],
        "trials_per_h_by_round": rounds,
        "ray_over_local_by_round": [y / x for y, x in zip(rounds["ray"], rounds["local"])],
        "hosts": described,
        "ray_hosts_used": sorted(ray_hosts),
        "ray_parallel": 2,
        "trials_per_mode": counts,
        "rounds": args.rounds,
        **cpu,
        "fingerprint": host_fingerprint(),
        "method": "two hosts on one machine (bench/two_hosts.py), one core each; after a "
        "warm-up of two uncounted trials per mode (Ray's slots made once per run: a placement "
        "group and an agent per host, ~1.3 s each), rounds interleaved, trials per hour over "
        "each mode's trials; overhead: a warm Ray trial on one host against a local trial on "
        "the same core, alternated, median paired difference",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result), file=sys.stderr)
    return 0


def _overhead(root: Path, hosts, core: int, pairs: int) -> list[float]:
    """Paired wall-time differences: a trial on the first host (its core) through Ray, minus
    one run here pinned to the same core; alternated."""
    from infrarsi.executors.ray_executor import RayExecutor

    host = hosts.alive()[0]
    on_host = RayExecutor(root / "pairs-ray", hosts.address, resources={host.resource: 1})
    here = PinnedSlots(root / "pairs-local", [core])
    _check("overhead warm-up", [on_host.run(requests(1)[0])])  # this shape's slot, made once
    walls: dict[str, list[float]] = {"ray": [], "local": []}
    for i, request in enumerate(requests(pairs)):
        for kind in ("local", "ray") if i % 2 == 0 else ("ray", "local"):
            t0 = time.perf_counter()
            records = here.run_all([request]) if kind == "local" else [on_host.run(request)]
            walls[kind].append(time.perf_counter() - t0)
            _check(f"overhead {kind}", records)
    return [r - loc for r, loc in zip(walls["ray"], walls["local"])]


def _check(mode: str, records: list[TrialRecord]) -> None:
    bad = [r.error for r in records if r.status is not TrialStatus.OK]
    if bad:
        raise RuntimeError(f"{mode}: {len(bad)} trial(s) did not run ok: {bad[0]}")


if __name__ == "__main__":
    sys.exit(main())
