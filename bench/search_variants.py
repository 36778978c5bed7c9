"""Variants of InfraRSI's search replayed on seen tables: a development study, never a judgement.

A change to the search is judged only on tables measured after the commit that froze it
(``bench/data/README.md``). Before that, this script says which way a candidate change moves
the mean per-seed area under the normalised regret curve (the benchmark's ranking score, the
``remeasure`` rule) on tables that were already seen, beside greedy's, so a session can tell a
change worth freezing from noise. A variant is a '+'-joined list of settings of the searcher's
module constants, e.g. ``nseeds:1+tr:1``:

- ``nseeds:N`` — ``N_SEEDS`` (``N - 1`` space-filling start points after the baseline and the
  priors' pick; 1: none);
- ``tr:R`` / ``tf:F`` — the trust region's starting radius and failures before it narrows;
- ``rerun:K`` — one trial in ``K`` re-measures a top config (a large ``K``: never);
- ``drop:E`` — the log-evidence a patch's prior must lose before it is dropped;
- ``cover:1`` — each free knob and patch compared alone once before the model exploits
  (``InfraRSISearcher._cover``; 0: off);
- ``local:1`` — the local search (``run/local.py``) after the start; with it ``lr:R`` (its
  starting radius), ``jz:Z`` (a far jump's margin in between-run sds), ``wg:G`` (the share of
  the stop effect below which a neighbourhood is spent);
- ``capholds:1`` — ``CAP_HOLDS``: once the incumbent beats the baseline and no untried config
  is under the P(OOM) cap, re-measure the top configs rather than propose one over it;
- ``pmax:P`` / ``pfound:P`` — ``P_OOM_MAX`` (the most P(OOM) any proposal may carry) and
  ``P_OOM_FOUND`` (the cap once the incumbent beats the baseline);
- ``rescue:R`` — ``pairing.RESCUE`` (on since 2026-12-07; 0: off): a start point that ran out
  of memory is followed by its memory-saving variant the acquisition scores highest under the
  cap; ``rkeep:K`` — ``pairing.RESCUE_KEEPS_MICRO_BATCH`` (1: only a variant at the same
  micro-batch, checkpointing or a memory patch; 0: a smaller micro-batch too);
- ``prec:L`` — ``problem.PRECISION_PRIOR_LOG`` (on since 2026-12-07, round seven; 0: off):
  the knob prior's claim for a precision the host's measured matmul peaks set apart;
- ``kpick:1`` / ``kprior:1`` — ``problem.KNOWN_MICRO_BATCH_PICK`` / ``_PRIOR``: without a
  memory estimate, the priors' pick keeps the baseline's micro-batch or a smaller one / the
  micro-batch prior claims nothing over the baseline's;
- ``amargin:M`` — ``problem.ANALYTIC_MARGIN``: how far (log) under the capacity an analytic
  estimate must be to be taken to fit (the prefilter of the priors' pick and of the start);
- ``ablate:NAME`` — InfraRSI without one idea (``peers.ABLATIONS``: ``no-censor``,
  ``no-pairing``, ``no-cut``), with the other settings;
- ``base`` — the committed search; ``greedy`` (or any peer's name) — a peer, for scale; a
  peer's name joined to settings (``greedy+kpick:1``) runs that peer under them (the start
  points every searcher runs first are the problem's).

    .venv/bin/python bench/search_variants.py --variants base,greedy,nseeds:1+tr:1 \\
        --table bench/data/moe-1node-wide-fb737a3983921667.csv --seeds 20 --out FILE

Each job sets every constant back to its committed value before its own settings, so worker
processes reused across jobs carry nothing over.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # as bench/searchers.py: small models, one thread

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

import replay  # noqa: E402
import scoring  # noqa: E402
import tables  # noqa: E402
from peers import ABLATIONS, PEERS  # noqa: E402

import infrarsi.run.infrarsi_searcher as search  # noqa: E402
from infrarsi.run import pairing, prior_fade, problem, remeasure, steptime, trust  # noqa: E402
from infrarsi.run import searchers as registry  # noqa: E402

SETTINGS = {  # variant key -> the module constant it sets (the searcher's, or ``module.NAME``)
    "nseeds": "N_SEEDS",
    "tr": "trust.TRUST_RADIUS",
    "tf": "trust.TRUST_FAILURES",
    "rerun": "remeasure.RERUN_EVERY",
    "drop": "prior_fade.PRIOR_DROP_EVIDENCE",
    "cover": "COVER",
    "local": "LOCAL",
    "lr": "LOCAL_RADIUS",
    "jz": "JUMP_Z",
    "wg": "WIDEN_GAIN",
    "dnoise": "DOCTOR_NOISE_FLOOR",
    "restarts": "steptime.GP_RESTARTS",
    "capholds": "CAP_HOLDS",
    "pmax": "P_OOM_MAX",
    "pfound": "P_OOM_FOUND",
    "rescue": "pairing.RESCUE",
    "rkeep": "pairing.RESCUE_KEEPS_MICRO_BATCH",
    "prec": "problem.PRECISION_PRIOR_LOG",
    "kpick": "problem.KNOWN_MICRO_BATCH_PICK",
    "kprior": "problem.KNOWN_MICRO_BATCH_PRIOR",
    "amargin": "problem.ANALYTIC_MARGIN",
}
MODULES = {
    "steptime": steptime,
    "prior_fade": prior_fade,
    "trust": trust,
    "remeasure": remeasure,
    "pairing": pairing,
    "problem": problem,
}
PEER_NAMES = [n for n in (*registry.SEARCHERS, *PEERS) if n != "infrarsi"]


def _owner(name: str) -> tuple[object, str]:
    """The module a setting's constant lives in, and the constant's own name."""
    module, _, attr = name.rpartition(".")
    return (MODULES[module] if module else search), attr


COMMITTED = {name: getattr(*_owner(name)) for name in SETTINGS.values()}


def apply_variant(variant: str) -> str:
    """Set the searcher's constants for ``variant``; the searcher to replay."""
    for name, value in COMMITTED.items():
        setattr(*_owner(name), value)
    if variant == "base":
        return "infrarsi"
    if variant in PEER_NAMES:
        return variant
    name = "infrarsi"
    for part in variant.split("+"):
        key, _, value = part.partition(":")
        if part in PEER_NAMES:
            name = part  # a peer under the variant's settings (the start points are shared)
            continue
        if key == "ablate" and f"infrarsi-{value}" in ABLATIONS:
            name = f"infrarsi-{value}"
            continue
        if key not in SETTINGS or not value:
            raise SystemExit(f"variant {part!r}: use KEY:VALUE with KEY one of {sorted(SETTINGS)}")
        kind = type(COMMITTED[SETTINGS[key]])
        number = float(value)
        setattr(
            *_owner(SETTINGS[key]),
            bool(number) if kind is bool else kind(number) if kind is int else number,
        )
    return name


@functools.cache
def setting_and_budget(path: str) -> tuple[replay.Setting, int]:
    """A table's replay setting and budget, read once per worker process (not once per job)."""
    table = tables.load(Path(path))
    budget = scoring.budget_trials(len(table.cells), max(scoring.BUDGET_PCTS))
    return replay.setting_of(table), budget


def area_of(job: tuple[str, str, int]) -> tuple[str, str, int, float, int]:
    """One (variant, table, seed) replay's area under the normalised regret curve, and its
    OOM trials within the budget."""
    variant, path, seed = job
    name = apply_variant(variant)
    setting, budget = setting_and_budget(path)
    trace = replay.replay(name, setting, seed, budget)
    ooms = trace["oom"][budget - 1] if trace["oom"] else 0
    return variant, setting.table.name, seed, scoring.area(trace["regret_norm"]), ooms


def study(variants: list[str], paths: list[str], seeds: int, jobs: int) -> dict:
    """Mean area per (table, variant), each variant's mean rank over the tables, and the
    median seed's OOM trials per (table, variant)."""
    work = [(v, p, s) for v in variants for p in paths for s in range(seeds)]
    areas: dict[str, dict[str, list[float]]] = {}
    ooms: dict[str, dict[str, list[int]]] = {}
    with ProcessPoolExecutor(jobs) as pool:
        for variant, table, _, area, oom in pool.map(area_of, work, chunksize=2):
            areas.setdefault(table, {}).setdefault(variant, []).append(area)
            ooms.setdefault(table, {}).setdefault(variant, []).append(oom)
    means = {t: {v: statistics.fmean(a) for v, a in d.items()} for t, d in areas.items()}
    oom_median = {t: {v: statistics.median(o) for v, o in d.items()} for t, d in ooms.items()}
    ranks = scoring.average_ranks(means)
    return {"seeds": seeds, "area_mean": means, "average_rank": ranks, "oom_median": oom_median}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", required=True, help="comma-separated variants")
    parser.add_argument("--table", action="append", required=True, help="a table CSV")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the study as JSON here")
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        apply_variant(v)  # a bad variant fails before any replay
    result = study(variants, args.table, args.seeds, args.jobs)
    for table, row in result["area_mean"].items():
        oom = result["oom_median"][table]
        print(table, "  ".join(f"{v}={a:.3f} (oom {oom[v]:g})" for v, a in row.items()))
    print("average rank", {v: round(r, 2) for v, r in result["average_rank"].items()})
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
