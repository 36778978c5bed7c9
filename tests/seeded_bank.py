"""The bank the session's shared ``optimize`` (``conftest.dense_optimized``) starts from: the
experiences of an earlier round of the same job — the recorded ledger
``tests/fixtures/ledgers/dense-1node-no-gain``, a real ``optimize`` of dense-1node at tiny — and
one experience of another earlier run that gained 4x on one of that round's configs.

Both stand for runs on this host: their hardware signature is replaced by this host's (the
Doctor's cached probe, as the bank's ingest builds it), so what the bank makes of them does not
depend on the machine the ledger was recorded on (transfer across hosts has its own benchmark,
``bench/transfer.py``). The 4x claim is large enough to stay above the priors' pick whatever a
loaded machine measured there (a 2x claim pooled with two measurements at ~1.03x expected 1.29x
and came after the pick and the Doctor's two seeds, past a budget of 3); it is one of the
recorded round's search trials on the baseline's knobs where it has one (a patch: a seed this
host's Doctor measured slow, bf16 where it is emulated, is no start point), the one measured
fewest times. ``tests/bank/test_bank_e2e.py`` reads what the optimize made of them."""

import json
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from infrarsi.bank.signatures import hardware_signature, signature_fp
from infrarsi.bank.transfer import SEED_MIN_SPEEDUP
from infrarsi.doctor.hardware import probe_hardware
from infrarsi.identity import config_key
from infrarsi.store.bank import BankStore, Experience

RECORDED = Path(__file__).parent / "fixtures" / "ledgers" / "dense-1node-no-gain"
EARLIER = "earlier-run-on-this-host"
SECRET = "pw-7f3c-never-written"  # the PostgreSQL bank's password, written nowhere by a run


@dataclass(frozen=True)
class SeededBank:
    """What the shared optimize's bank held before it ran."""

    url: str  # with its password where the bank is PostgreSQL
    secret: str | None  # that password (None: a SQLite file)
    first_run_id: str  # the recorded round's run
    baseline: dict  # its baseline's knobs
    experiences: int  # how many the bank held, the 4x claim left out
    earlier_key: tuple  # the 4x claim's configuration
    by_stage: dict = field(default_factory=dict)  # the bank's experiences per stage, before
    gained_first: set = field(default_factory=set)  # the recorded round's configs that gained


def key_of(e: Experience) -> tuple:
    return config_key(e.knobs_json, [p["id"] for p in e.patches_json])


def on_this_host(e: Experience, probed: dict) -> Experience:
    """``e`` as this host would have measured it: its hardware signature this host's
    (``probed``: this host's ``probe_hardware``)."""
    old = e.hardware_json
    here = hardware_signature(
        probed,
        old.get("capacity_per_rank_bytes"),
        old.get("ranks_per_node"),
        old.get("nodes"),
        old.get("nodes_per_host"),
    )
    fp = here.get("fingerprint") or signature_fp(here)
    return e.model_copy(update={"hardware_json": here, "hardware_fp": fp})


def seed(url: str, secret: str | None = None) -> SeededBank:
    """Fill the bank at ``url`` with the recorded round and the 4x claim."""
    with tempfile.TemporaryDirectory() as folder:  # a copy: opening a bank upgrades its schema
        copy = Path(shutil.copy(RECORDED / "bank.sqlite", folder))
        recorded = BankStore(f"sqlite:///{copy}")
        experiences, texts = recorded.experiences(), recorded.patch_texts()
        recorded.engine.dispose()
    probed = probe_hardware()  # once: its cache file read, or the host measured
    first = [on_this_host(e, probed) for e in experiences]
    bank = BankStore(url)
    assert bank.add(first, texts) == len(first)
    run_id = json.loads((RECORDED / "run.json").read_text())["run_id"]
    baseline = json.loads((RECORDED / "doctor.json").read_text())["knobs"]
    earlier = _earlier_gain(first, run_id, baseline)
    assert bank.add([earlier]) == 1
    by_stage = Counter(str(e.stage.value) for e in [*first, earlier])
    return SeededBank(
        url,
        secret,
        run_id,
        baseline,
        len(first),
        key_of(earlier),
        dict(by_stage),
        _gains(first, baseline),
    )


def _earlier_gain(first: list[Experience], run_id: str, baseline: dict) -> Experience:
    """A copy, as another earlier run's with a 4x speed-up, of one of the recorded round's
    search trials that ran (not its baseline)."""
    base = config_key(baseline, [])
    mine = [e for e in first if e.run_id == run_id and e.stage in ("run", "apply")]
    times = Counter(key_of(e) for e in mine)
    ran = [e for e in mine if e.stage == "run" and e.status == "ok" and key_of(e) != base]
    patches_only = [e for e in ran if config_key(e.knobs_json, []) == base]
    trial = min(patches_only or ran, key=lambda e: times[key_of(e)])
    return trial.model_copy(
        update={"id": None, "run_id": EARLIER, "speedup": 4.0, "key": f"{EARLIER}/run/{trial.key}"}
    )


def _gains(first: list[Experience], baseline: dict) -> set:
    """The recorded round's configs that measured a gain worth a seed."""
    return {
        key_of(e)
        for e in first
        if e.stage in ("run", "apply")
        and e.status == "ok"
        and not e.censored
        and (e.speedup or 0) >= SEED_MIN_SPEEDUP
    } - {config_key(baseline, [])}
