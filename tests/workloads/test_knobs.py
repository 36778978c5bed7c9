import pytest

from infrarsi.workloads import AssignmentError, baseline, parse_assignments, resolve


def test_baseline_derives_grad_accum(dense):
    knobs = baseline(dense, "tiny")
    assert knobs["micro_batch"] == 2 and knobs["nproc"] == 2
    assert knobs["grad_accum"] == 8 // (2 * 2)
    assert knobs["precision"] == "fp32" and knobs["compile"] == "off"


def test_override_redrives_grad_accum(dense):
    assert resolve(dense, "tiny", {"micro_batch": "4"})["grad_accum"] == 1
    assert resolve(dense, "tiny", {"nproc": "1", "micro_batch": "2"})["grad_accum"] == 4


def test_broken_constraint_names_it_and_why(dense):
    with pytest.raises(AssignmentError) as info:
        resolve(dense, "tiny", {"micro_batch": "4", "grad_accum": "2"})
    text = str(info.value)
    assert "micro_batch * grad_accum * nproc == global_batch_seqs" in text
    assert "grad_accum=2" in text and "tokens per optimizer step are fixed" in text


def test_micro_batch_that_does_not_divide(dense):
    with pytest.raises(AssignmentError, match="whole micro-batches"):
        resolve(dense, "tiny", {"micro_batch": "8", "nproc": "2"})


def test_unknown_knob_and_out_of_domain(dense):
    with pytest.raises(AssignmentError, match="unknown knob 'microbatch'"):
        resolve(dense, "tiny", {"microbatch": "2"})
    with pytest.raises(AssignmentError, match="outside its domain"):
        resolve(dense, "tiny", {"precision": "fp8"})
    with pytest.raises(AssignmentError, match="not a boolean"):
        resolve(dense, "tiny", {"accum_no_sync": "maybe"})


def test_parse_assignments():
    assert parse_assignments(["a=1", " b = x "]) == {"a": "1", "b": "x"}
    with pytest.raises(AssignmentError, match="KNOB=VALUE"):
        parse_assignments(["micro_batch"])
