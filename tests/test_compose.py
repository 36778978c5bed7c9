"""The composer's ledgers for commands run by hand: where ``infrarsi doctor`` opens its run,
and when ``infrarsi run`` continues it (no trial: a store and a report on disk)."""

import json
from pathlib import Path

from infrarsi.compose import doctors_folder, doctors_ledger, new_ledger
from infrarsi.contract import load_contract
from infrarsi.options import SearchOptions
from infrarsi.records import DoctorReport
from infrarsi.store import RunStatus

RECORDED = Path(__file__).parent / "fixtures" / "ledgers" / "dense-1node-no-gain"


def _doctored(tmp_path: Path):
    """A contract, the Doctor's ledger opened in its folder, and a report naming it."""
    contract = load_contract(RECORDED / "contract.yaml")
    folder = doctors_folder(contract, tmp_path / "runs")
    ledger = new_ledger(contract, folder, SearchOptions(), RunStatus.DOCTORING)
    report = DoctorReport.load(RECORDED / "doctor.json").model_copy(
        update={"run_dir": str(folder), "run_id": ledger.run_id}
    )
    return contract, folder, ledger, report


def test_the_doctor_opens_its_run_in_the_contracts_folder_or_the_next_free_one(tmp_path):
    contract = load_contract(RECORDED / "contract.yaml")
    runs = tmp_path / "runs"
    first = doctors_folder(contract, runs)
    assert first == runs / contract.contract_hash[:12]
    first.mkdir(parents=True)
    assert doctors_folder(contract, runs) == first  # a folder without a started run
    (first / "run.json").write_text(json.dumps({"run_id": "r"}))
    second = doctors_folder(contract, runs)
    assert second.name == f"{first.name}-2"
    (second).mkdir()
    (second / "run.json").write_text("{}")
    assert doctors_folder(contract, runs).name == f"{first.name}-3"


def test_a_run_continues_the_doctors_ledger_only_where_nothing_else_is_asked_for(tmp_path):
    _, folder, ledger, report = _doctored(tmp_path)
    found = doctors_ledger(report, folder, None)
    assert found is not None and found[0] == folder and found[1].run_id == ledger.run_id
    assert found[1].run.status is RunStatus.DOCTORING
    assert doctors_ledger(report, tmp_path / "elsewhere", None) is None  # another run folder
    assert doctors_ledger(report, folder, "sqlite:///other.sqlite") is None  # another store
    assert doctors_ledger(None, folder, None) is None
    assert doctors_ledger(report.model_copy(update={"run_dir": None}), folder, None) is None
    other = report.model_copy(update={"run_id": "not-this-folders-run"})
    assert doctors_ledger(other, folder, None) is None


def test_a_doctors_run_once_started_or_searched_is_not_continued(tmp_path):
    contract, folder, ledger, report = _doctored(tmp_path)
    run = ledger.run
    ledger.store.save_run(run.model_copy(update={"status": RunStatus.RUNNING}))
    assert doctors_ledger(report, folder, None) is None  # a search ran in it
    _, folder, _, report = _doctored(tmp_path / "again")
    (folder / "run.json").write_text("{}")
    assert doctors_ledger(report, folder, None) is None  # started: resume it instead
