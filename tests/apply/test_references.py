"""Apply measures the same-knob reference of a patch with other knobs, once per config and
round seed, and verify judges the patch against it; each round runs at a challenge seed drawn
then; a resumed Apply runs nothing again and keeps the seeds."""

import json

import pytest
from conftest import FIXTURES

from infrarsi.apply.references import REFERENCE
from infrarsi.apply.rounds import PROGRESS_FILE, Rounds
from infrarsi.executors import LocalExecutor
from infrarsi.init import make_contract, read_instruction
from infrarsi.records import CandidateResult
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
    stored = []

    def rounds():
        return Rounds(
            contract,
            tmp_path,
            LocalExecutor(tmp_path),
            candidates,
            base,
            stored=lambda record, label: stored.append(label),
        )

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
    journal = [json.loads(line) for line in (tmp_path / PROGRESS_FILE).read_text().splitlines()]
    assert sum(REFERENCE in entry for entry in journal) == 1
    assert len(stored) == 5  # baseline, c1, the reference, c2, the closing baseline

    again = rounds()
    resumed = {m.label: m for m in again.run(1) if m.round == 0}
    assert len(stored) == 5, "a resumed Apply ran a trial again"
    assert resumed["c1"] == measured["c1"] and resumed["c2"] == measured["c2"]
