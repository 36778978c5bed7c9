"""The experience bank stage: what every run measured goes in (``ingest_run``), and a new run
asks it for seeds and priors (``advice_for``), weighted by how similar the host and workload
are (``signatures``, ``transfer``). The bank's tables live in ``store/bank.py``."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from infrarsi.bank.ingest import experiences_of_run
from infrarsi.bank.signatures import (
    hardware_signature,
    launchers_per_host,
    low_precision_reader,
    workload_signature,
)
from infrarsi.bank.transfer import advise
from infrarsi.bank.translate import translator
from infrarsi.callbacks import Callback, RoundEnd
from infrarsi.contract import Contract
from infrarsi.events import BankIngested, EventSink
from infrarsi.identity import config_key
from infrarsi.records import (
    BANK_ADVICE_FILE,
    BankAdvice,
    BankIngest,
    DoctorReport,
    seed_held,
)
from infrarsi.records.trial import TrialRecord
from infrarsi.stages import Stage
from infrarsi.store import Ledger
from infrarsi.store.bank import BankStore, StoredSeed

__all__ = ["advice_for", "ingest_run", "BankIngester", "BankStore"]


def advice_for(contract: Contract, report: DoctorReport | None, bank: BankStore) -> BankAdvice:
    """The bank's advice for a run of ``contract`` on the host the Doctor measured."""
    manifest = contract.manifest()
    knobs = report.knobs if report else {}
    ranks = next((knobs.get(k) for k in manifest.knobs_with_role("ranks")), None)
    hardware = hardware_signature(
        report.hardware if report else {},
        contract.mem_cap_bytes,
        ranks,
        manifest.launch.nodes,
        _nodes_per_host(manifest.launch.nodes, report),
    )
    workload = workload_signature(
        manifest, contract.scale, knobs, report.flops_per_token if report else None
    )
    return advise(
        bank.experiences(),
        hardware,
        workload,
        bank_url=bank.url,
        baseline=knobs or None,
        translate=translator(manifest, contract.scale, hardware),
        low_precision=low_precision_reader(manifest),
    )


def _nodes_per_host(nodes: int, report: DoctorReport | None) -> int:
    """How many of the workload's nodes shared one host in the Doctor's trials (the first
    record that names its launchers' nodes; all of them where none does)."""
    for trial in report.trials if report else []:
        path = Path(trial.trial_dir) / "record.json"
        try:
            spread = TrialRecord.load(path).launcher_nodes
        except (OSError, ValueError):  # a trial without a readable record says nothing
            continue
        if spread:
            return launchers_per_host(nodes, spread)
    return nodes


def ingest_run(run_dir: Path, bank: BankStore, ledger: Ledger | None = None) -> BankIngest:
    """Add a run directory's experiences to the bank, and judge the seeds it was given (from
    its ``bank_advice.json``): each seed's measured speed-up here (the median of its search
    trials) and whether it held (faster than the baseline)."""
    experiences, texts, ctx = experiences_of_run(Path(run_dir), ledger)
    added = bank.add(experiences, texts)
    by_stage: dict[str, int] = {}
    for e in experiences:
        by_stage[e.stage] = by_stage.get(e.stage, 0) + 1
    seeds = _judge_seeds(Path(run_dir), ctx.run.run_id, experiences, bank)
    return BankIngest(
        bank_url=bank.url,
        run_id=ctx.run.run_id,
        added=added,
        already=len(experiences) - added,
        by_stage=by_stage,
        seeds=seeds,
    )


def _judge_seeds(run_dir: Path, run_id: str, experiences, bank: BankStore) -> list[dict]:
    path = run_dir / BANK_ADVICE_FILE
    if not path.exists():
        return []
    advice = BankAdvice.load(path)
    if not bank.seeds(run_id) and advice.seeds:
        bank.add_seeds(
            [
                StoredSeed(
                    run_id=run_id,
                    created_unix_s=time.time(),
                    knobs_json=s.knobs,
                    patches_json=s.patches,
                    expected_speedup=s.expected_speedup,
                    similarity=s.similarity,
                    source_json={"sources": s.sources, "experiences": s.experiences},
                )
                for s in advice.seeds
            ]
        )
    out = []
    for stored in bank.seeds(run_id):
        key = config_key(stored.knobs_json, stored.patches_json)
        measured = [
            e.speedup
            for e in experiences
            if e.stage is Stage.RUN
            and e.status.is_ok()
            and e.speedup
            and config_key(e.knobs_json, [p["id"] for p in e.patches_json]) == key
        ]
        speedup = statistics.median(measured) if measured else None
        held = seed_held(speedup)
        if stored.id is not None:
            bank.set_seed_outcome(stored.id, speedup, held)
        out.append(
            {
                "knobs": stored.knobs_json,
                "patches": stored.patches_json,
                "expected_speedup": stored.expected_speedup,
                "measured_speedup": speedup,
                "held": held,
                "similarity": stored.similarity,
                "sources": stored.source_json.get("sources", []),
            }
        )
    return out


class BankIngester(Callback):
    """The bank's ingest as a round's callback: when the round ends, what its store holds
    goes into ``bank`` (``ingested``: what went in, None before then), and the screen is
    told."""

    def __init__(self, bank: BankStore, emit: EventSink) -> None:
        self.bank, self.emit = bank, emit
        self.ingested: BankIngest | None = None

    def on_round_end(self, end: RoundEnd) -> None:
        self.ingested = ingest_run(end.run_dir, self.bank, end.ledger)
        self.emit(BankIngested(round=end.round, url=self.bank.url, added=self.ingested.added))
