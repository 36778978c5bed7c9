"""The registry of kinds of change: each kind is one member and one row, and every reader of
a kind (the contract, the knob rules, the Doctor's calibration, verification) reads that row."""

from infrarsi.contract import CHANGE_KINDS
from infrarsi.doctor.calibrate import KIND_MULTIPLE, MULTIPLE, SAMPLED_KINDS, tolerances
from infrarsi.verify import FALLBACK_KINDS
from infrarsi.workloads import change_kinds, find
from infrarsi.workloads.kinds import KINDS, ChangeKind


def test_every_kind_has_one_row_and_the_contract_lists_them_all():
    assert set(KINDS) == set(ChangeKind)
    assert CHANGE_KINDS == tuple(k.value for k in ChangeKind)
    assert set(FALLBACK_KINDS.values()) == set(CHANGE_KINDS)
    assert SAMPLED_KINDS == {k.value for k, row in KINDS.items() if row.sampled}


def test_a_knob_of_a_kinds_role_makes_that_kind_and_no_other():
    dense = find("dense-1node")
    base = {"micro_batch": 8, "grad_accum": 1, "precision": "fp32"}
    assert change_kinds(dense, base, {**base, "micro_batch": 4, "grad_accum": 2}) == {"split"}
    assert change_kinds(dense, base, {**base, "precision": "bf16"}) == {"precision"}
    assert change_kinds(dense, base, dict(base)) == frozenset()


def test_each_kinds_floor_is_scaled_by_the_multiple_its_row_names():
    floors = {"weight_rerun": 1e-6, "weight_split": 1e-2, "weight_precision": 1e-2}
    eq = tolerances(floors)
    assert eq.by_kind["split"]["weight"] == KIND_MULTIPLE * 1e-2
    assert eq.by_kind["precision"]["weight"] == MULTIPLE["bf16"] * 1e-2
    assert all(type(k) is str for k in eq.by_kind)  # stored as text, read back the same
