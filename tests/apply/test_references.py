"""Apply measures the same-knob reference of a patch with other knobs, once per config and
round seed, and verify judges the patch against it; each round runs at a challenge seed drawn
then; a resumed Apply runs nothing again and keeps the seeds."""

import pytest
from conftest import FIXTURES

from infrarsi.apply.ledger import ApplyLedger
from infrarsi.apply.references import REFERENCE
from infrarsi.apply.rounds import Rounds
from infrarsi.executors import LocalExecutor
from infrarsi.init import make_contract, read_instruction
from infrarsi.options import Budget, SearchOptions
from infrarsi.records import CandidateResult
from infrarsi.stages import Stage
from infrarsi.store import RunStatus, Store, StoredRun, sqlite_url
from infrarsi.workloads import find, knobs

pytestmark = pytest.mark.slow
CHEAT = str(FIXTURES / "adversarial" / "drop_weight_decay.diff")


def test_apply_judges_each_patch_against_its_same_knob_reference_measured_once(tmp_path):
    dense = find("dense-1node")
    contract = make_contract(dense, "tiny", "cut time", read_instruction("cut time", []))
    split = {"micro_batch": 4}
    candidates = [
        CandidateResult(label="c1", knobs=split, patches=["sdpa_attention"]),
        CandidateResult(label="c2", knobs=split, patches=[CHEAT]),
    ]
    base = knobs.baseline(dense, "tiny")
    store = Store(sqlite_url(tmp_path))
    store.create_run(_run(contract))

    def rounds():  # a resumed Apply opens the run's store anew
        ledger = ApplyLedger(Store(sqlite_url(tmp_path)), "r1")
        return Rounds(contract, ledger, LocalExecutor(tmp_path), candidates, base)

    first = rounds()
    every = first.run(1)
    measured = {m.label: m for m in every if m.round == 0}
    # a challenge seed per round, drawn by the harness: never the contract's, set for each run
    seeds = {m.round: m.seed for m in every}
    assert set(seeds) == {0, 1} and None not in seeds.values() and seeds[0] != seeds[1]
    assert 1234 not in seeds.values()
    assert {m.seed for m in every if m.round == 0} == {seeds[0]}
    # the seeds moved the runs (the rounds' baselines began from other parameters)
    assert not [n for m in every for n in m.not_checked if "no effect seen" in n]
    assert measured["c1"].valid, measured["c1"].reasons
    assert any(r.startswith("same-knob reference") for r in measured["c1"].ran), measured["c1"]
    assert not measured["c2"].valid
    assert any("trained a different model" in r for r in measured["c2"].reasons)
    [reference] = first.references.runs.values()
    assert reference.role == "same_knobs" and reference.patches == []
    assert reference.seed == seeds[0]
    assert reference.for_labels == ["c1", "c2"] and not reference.uncapped
    stored = store.trials("r1", Stage.APPLY)  # each with Apply's verdict: its journal
    # baseline, the reference (measured as c1 is judged), c1, c2, the closing baseline
    labels = [t.label.split()[0] for t in stored]
    assert labels == ["baseline", "reference", "c1", "c2", "baseline"]
    assert [REFERENCE in t.verdict for t in stored] == [False, True, False, False, False]

    again = rounds()
    resumed = {m.label: m for m in again.run(1) if m.round == 0}
    assert len(store.trials("r1", Stage.APPLY)) == 5, "a resumed Apply ran a trial again"
    assert resumed["c1"] == measured["c1"] and resumed["c2"] == measured["c2"]
    assert set(again.references.runs) == set(first.references.runs) and again.seeds == first.seeds


def _run(contract) -> StoredRun:
    search = SearchOptions(searcher="random", budget=Budget(trials=1))
    return StoredRun.opened("r1", contract, contract.workload, search, RunStatus.FINISHED)
