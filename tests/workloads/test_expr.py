import pytest

from infrarsi.workloads.expr import ExprError, evaluate, names


def test_arithmetic_and_comparisons():
    env = {"micro_batch": 2, "grad_accum": 4, "nproc": 1, "global_batch_seqs": 8}
    assert evaluate("micro_batch * grad_accum * nproc == global_batch_seqs", env) is True
    assert evaluate("global_batch_seqs // (micro_batch * nproc)", env) == 4
    assert evaluate("nproc in (1, 2) and not micro_batch > 4", env) is True


@pytest.mark.parametrize("text", ["__import__('os')", "a.b", "[x for x in y]", "lambda: 1"])
def test_refuses_calls_attributes_and_comprehensions(text):
    with pytest.raises(ExprError, match="not allowed"):
        evaluate(text, {"a": 1, "y": []})


def test_unknown_name_and_zero_division_are_named():
    with pytest.raises(ExprError, match="unknown name 'z'"):
        evaluate("z + 1", {})
    with pytest.raises(ExprError, match="division by zero"):
        evaluate("a // b", {"a": 1, "b": 0})


def test_names():
    assert names("a * (b + c) == d") == {"a", "b", "c", "d"}
