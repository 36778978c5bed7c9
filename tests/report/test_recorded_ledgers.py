"""Readers of a round replayed on a recorded one: a real ``optimize`` round's ledger (its
``run.sqlite``, ``doctor.json``, ``apply.json``, bank advice and contract), recorded once under
``tests/fixtures/ledgers/`` with what the live run wrote from it (``report.md``,
``audit.jsonl``). The report, the audit, Apply's decision and the bank's ingest are pure
readings of the ledger: here they run in seconds, with no trial, and must say what the live
run said. Each ledger's README says how it was recorded and when to record it again."""

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES

from infrarsi.apply import judge
from infrarsi.audit import AuditLog
from infrarsi.bank import ingest_run
from infrarsi.records import AUDIT_FILE, ApplyResult
from infrarsi.report import write_report
from infrarsi.store import Ledger
from infrarsi.store.bank import BankStore

LEDGERS = FIXTURES / "ledgers"
RECORDED = sorted(p.name for p in LEDGERS.iterdir() if (p / "run.sqlite").is_file())


@pytest.fixture(params=RECORDED)
def recorded(request, tmp_path) -> Path:
    """A copy of one recorded round's run folder, its ``run.json`` naming the copy's store,
    without what the live run wrote from the ledger (kept as ``recorded-*``)."""
    run_dir = tmp_path / request.param
    shutil.copytree(LEDGERS / request.param, run_dir)
    info = json.loads((run_dir / "run.json").read_text())
    info["store_url"] = info["store_url"].replace("RUN_DIR", str(run_dir))
    (run_dir / "run.json").write_text(json.dumps(info))
    for name in ("report.md", AUDIT_FILE):
        (run_dir / name).rename(run_dir / f"recorded-{name}")
    return run_dir


def _without_paths(text: str) -> str:
    """The text with every absolute path under /tmp left out (where each run was written)."""
    return re.sub(r"/tmp/[^\s)|`\"']*", "", text)


def test_the_report_of_a_recorded_round_is_what_the_live_round_wrote(recorded):
    written = write_report(recorded)
    assert _without_paths((recorded / "report.md").read_text()) == _without_paths(
        (recorded / "recorded-report.md").read_text()
    )
    assert {Path(f).name for f in written.figures} >= {"best_so_far.png", "time_vs_memory.png"}
    ledger = Ledger.of_run_dir(recorded)
    assert written.summary.trials == len(ledger.store.trials(ledger.run_id))


def test_the_audit_rebuilt_from_the_ledger_is_the_one_written_as_trials_ended(recorded):
    AuditLog.following(Ledger.of_run_dir(recorded), recorded)
    live = (recorded / f"recorded-{AUDIT_FILE}").read_text().splitlines()
    assert (recorded / AUDIT_FILE).read_text().splitlines() == live
    assert {json.loads(line)["stage"] for line in live} >= {"doctor", "run", "apply"}


def test_applys_decision_replayed_from_its_measurements_is_the_one_it_made(recorded):
    applied = ApplyResult.load(recorded)
    judged, promoted, decision = judge(
        applied.candidates, applied.measurements, applied.rounds, applied.confidence
    )
    assert (promoted, decision) == (applied.promoted, applied.decision)
    assert [c.speedup for c in judged] == [c.speedup for c in applied.candidates]


def _experiences(bank: BankStore) -> list[tuple]:
    """What the bank learned of a round, without when it was written down."""
    fields = ("key", "stage", "status", "knobs_json", "patches_json", "speedup", "censored")
    fields += ("ranked_time_per_step_s", "peak_mem_bytes", "hardware_fp", "workload_fp")
    return sorted(tuple(str(getattr(e, f)) for f in fields) for e in bank.experiences())


def test_the_bank_learns_from_the_ledger_what_it_learned_from_the_live_round(recorded, tmp_path):
    bank = BankStore(f"sqlite:///{tmp_path / 'bank.sqlite'}")
    first = ingest_run(recorded, bank, Ledger.of_run_dir(recorded))
    assert _experiences(bank) == _experiences(BankStore(f"sqlite:///{recorded / 'bank.sqlite'}"))
    assert set(first.by_stage) == {"doctor", "run", "apply"}
    again = ingest_run(recorded, bank)  # each experience once, however often it is ingested
    assert again.added == 0 and again.already == first.added
