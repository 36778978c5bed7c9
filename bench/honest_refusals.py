"""How often Apply's checks refuse an honest candidate: catalog patches on other knobs, knobs
alone, a patch on the baseline's knobs and an unchanged run, under a throughput objective.

    .venv/bin/python bench/honest_refusals.py --rounds 8 --load 0.5

The demo's workload and scale (dense-1node at ``steady``), "maximise training throughput": the
Doctor measures the baseline and calibrates its tolerances (another split, ranks, bf16), then
Apply's own rounds (``apply.rounds.Rounds``: the baseline, every candidate, the same-knob
references a patch with other knobs needs, a reference's start-up measured again before a
start line is refused) run ``--rounds`` times with no candidate dropped, each round at a
challenge seed of its own. Every (round, candidate) is one pair; a refusal is a measurement
Apply's checks found invalid, counted with its reasons. Each round also runs every patched
candidate as the search would (the contract's steps, screened against the Doctor's baseline:
``run.screened``) and counts its refusals.

``--load F`` keeps one core busy a share F of the time for the whole run (a loaded host). The
file ``bench/results/honest-refusals.json`` is keyed by the host's fingerprint and written
after every measurement; ``--work DIR`` keeps the rounds' store there, so a killed run
resumes where it stopped (the rounds' ledger), nothing measured twice.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

from aa_refusals import SCALE, WORKLOAD, comment_only, doctored

from infrarsi.apply.ledger import ApplyLedger
from infrarsi.apply.rounds import BASELINE, Rounds
from infrarsi.events import MeasurementEnded
from infrarsi.executors import LocalExecutor, TrialRequest
from infrarsi.host import host_fingerprint
from infrarsi.identity import Configuration
from infrarsi.options import SearchOptions
from infrarsi.records import CandidateResult, Measurement
from infrarsi.run.screened import screened
from infrarsi.store import RunStatus, Store, StoredRun, sqlite_url
from infrarsi.trial.spec import challenge_seed
from infrarsi.workloads import find, knobs

RESULTS = Path(__file__).parent / "results" / "honest-refusals.json"
COMMENT = "comment only"  # the unchanged run's patch: a comment line added to model.py
# (label, knobs, patches)
CANDIDATES = [
    ("unchanged", {}, [COMMENT]),
    ("fused_adamw", {}, ["fused_adamw"]),
    ("split", {"micro_batch": 4}, []),
    ("split+sdpa", {"micro_batch": 4}, ["sdpa_attention"]),
    ("split1+fused_qkv", {"micro_batch": 1}, ["fused_qkv"]),
]


def busy(share: float) -> None:
    """Keep this process's core busy ``share`` of every 100 ms (the host's other work)."""
    while True:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.1 * share:
            pass
        time.sleep(0.1 * (1 - share))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--load", type=float, default=0.0, help="share of one core kept busy")
    parser.add_argument("--work", type=Path, default=None, help="the rounds' folder (resume)")
    args = parser.parse_args()
    load = None
    if args.load > 0:
        load = multiprocessing.Process(target=busy, args=(args.load,), daemon=True)
        load.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run(args.rounds, args.load, args.work or Path(tmp))
    finally:
        if load is not None:
            load.terminate()


def run(rounds: int, load: float, work: Path) -> None:
    """Doctor the baseline (once per work folder), then the rounds, summarised as they go."""
    fingerprint = host_fingerprint()
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    mine = saved.setdefault(fingerprint, {})
    manifest = find(WORKLOAD)
    work.mkdir(parents=True, exist_ok=True)
    contract, report = _doctored(manifest, work)
    patch = str(comment_only(manifest, work))
    candidates = [
        CandidateResult(label=label, knobs=k, patches=[patch if p == COMMENT else p for p in ps])
        for label, k, ps in CANDIDATES
    ]
    store = Store(sqlite_url(work))
    if not any(r.run_id == "honest" for r in store.runs()):
        options = SearchOptions()
        store.create_run(
            StoredRun.opened("honest", contract, contract.workload, options, RunStatus.FINISHED)
        )
    executor = LocalExecutor(work)
    base_knobs = knobs.baseline(manifest, SCALE)
    screens: list[dict] = mine.get("screens", []) if mine.get("work") == str(work) else []
    measured: list[Measurement] = []

    def heard(event: object) -> None:
        if isinstance(event, MeasurementEnded):
            measured.append(event.measurement)
            m = event.measurement
            said = "; ".join(r[:160] for r in m.reasons) if m.valid is False else "ok"
            print(f"round {m.round} {m.label}: {said}", flush=True)
            _save(saved, mine, contract, load, work, measured, screens)

    ledger = ApplyLedger(store, "honest")
    rounds_run = Rounds(contract, ledger, executor, candidates, base_knobs, heard)
    for _ in range(rounds - len(screens)):  # the search's screen, one trial a patched candidate
        screens.append(_screened(contract, report, executor, candidates, manifest, base_knobs))
        _save(saved, mine, contract, load, work, measured, screens)
    measured[:] = rounds_run.run(rounds)
    mine["references"] = [r.model_dump(mode="json") for r in rounds_run.references.runs.values()]
    _save(saved, mine, contract, load, work, measured, screens)


def _doctored(manifest, work: Path):
    """The contract and the Doctor's report, calibrated; kept in ``work`` for a resumed run."""
    from infrarsi.contract import load_contract
    from infrarsi.records import DoctorReport

    sealed, doctor = work / "contract.yaml", work / "doctor.json"
    if sealed.exists() and doctor.exists():
        return load_contract(sealed), DoctorReport.load(doctor)
    contract, report = doctored(manifest, work, calibrate=True)
    contract.save(sealed)
    report.save(doctor)
    return contract, report


def _screened(contract, report, executor, candidates, manifest, base_knobs) -> dict:
    """Every patched candidate as one search trial at the contract's steps, screened."""
    seed = challenge_seed()
    out = {}
    for c in candidates:
        if not c.patches:
            continue
        request = TrialRequest.of(
            contract, Configuration.of(c.knobs, c.patches), workdir="search-trials", seed=seed
        )
        record = executor.wait(executor.submit(request))
        judged = screened(record, contract, manifest, base_knobs, report.timing)
        out[c.label] = {
            "refused": judged.error if judged.status.value == "invalid" else None,
            "status": judged.status.value,
            "lines_step_s": record.metrics.harness_step_time_s if record.metrics else None,
            "window_step_s": judged.window_step_time_s,
        }
        print(f"search {c.label}: {out[c.label]['refused'] or judged.status.value}", flush=True)
    return out


def _save(saved, mine, contract, load, work, measured, screens) -> None:
    """The pairs so far, their refusals and the compared ratios, written to the results."""
    base = {m.round: m.compared_s for m in measured if m.label == BASELINE and m.compared_s}
    pairs = [m for m in measured if m.label != BASELINE]
    refused = [m for m in pairs if m.valid is False]
    by_label: dict[str, dict] = {}
    for m in pairs:
        row = by_label.setdefault(m.label, {"pairs": 0, "refused": 0, "ratios": [], "reasons": []})
        row["pairs"] += 1
        row["refused"] += m.valid is False
        row["reasons"] += m.reasons if m.valid is False else []
        if m.compared_s and base.get(m.round):
            row["ratios"].append(base[m.round] / m.compared_s)
    for row in by_label.values():
        row["ratio_median"] = statistics.median(row["ratios"]) if row["ratios"] else None
    screened_pairs = [v for s in screens for v in s.values()]
    mine.update(
        work=str(work),
        load_share_of_one_core=load,
        timed_steps=contract.noise.timed_steps,
        summary={
            "pairs": len(pairs),
            "apply_refused": len(refused),
            "search_trials": len(screened_pairs),
            "search_refused": sum(bool(v["refused"]) for v in screened_pairs),
            "host": host_fingerprint(),
            "command": "bench/honest_refusals.py --rounds N --load F",
        },
        candidates=by_label,
        screens=screens,
    )
    RESULTS.write_text(json.dumps(saved, indent=2) + "\n")


if __name__ == "__main__":
    main()
