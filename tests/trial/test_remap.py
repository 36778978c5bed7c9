"""A patch's mapping to the reference layout is checked to be a re-indexing of its input and
applied by the harness: the patch's code never sees the trained parameters."""

import pytest
import torch

from infrarsi.trial.evaluation.remap import NotAMapping, apply, coded, index_map


def _saved():
    g = torch.Generator().manual_seed(0)
    return {
        "attn.qkv.weight": torch.randn(12, 4, generator=g),
        "attn.qkv.bias": torch.randn(12, generator=g),
        "wte.weight": torch.randn(5, 4, generator=g),
        "ln.weight": torch.randn(4, generator=g),
    }


def split_qkv(params):
    """An honest mapping: the fused projection split back, the tied head named twice, a
    transposed copy, one entry dropped."""
    out = {}
    for name, tensor in params.items():
        prefix, _, kind = name.rpartition(".qkv.")
        if prefix:
            for part, piece in zip(("key", "query", "value"), tensor.chunk(3, dim=0)):
                out[f"{prefix}.{part}.{kind}"] = piece.clone()
        elif name != "ln.weight":
            out[name] = tensor
    out["lm_head.weight"] = params["wte.weight"]
    out["wte.transposed"] = params["wte.weight"].t().contiguous()
    return out


def test_an_honest_mapping_is_read_from_codes_and_applied_exactly_by_the_harness():
    saved = _saved()
    codes = coded(saved)
    got = apply(saved, index_map(codes, split_qkv(codes.tensors)))
    want = split_qkv(saved)
    assert set(got) == set(want)
    for name in want:
        assert torch.equal(got[name], want[name]), name


def test_mixed_precisions_keep_their_own():
    saved = {"a": torch.randn(3), "b": torch.randn(2).to(torch.bfloat16)}
    codes = coded(saved)
    got = apply(saved, index_map(codes, {"b": codes.tensors["b"], "a": codes.tensors["a"]}))
    assert got["b"].dtype == torch.bfloat16 and torch.equal(got["b"], saved["b"])
    assert torch.equal(got["a"], saved["a"])


@pytest.mark.parametrize(
    "cheat, why",
    [
        (lambda p: {k: v + 1e-3 for k, v in p.items()}, "not a re-indexing"),
        (lambda p: {k: v * 1.0001 for k, v in p.items()}, "not a re-indexing"),
        (lambda p: {k: torch.zeros_like(v) for k, v in p.items()}, "not a re-indexing"),
        (lambda p: {**p, "wte.weight": p["wte.weight"] + p["wte.weight"]}, "not a re-indexing"),
        (lambda p: {k: v.float() for k, v in p.items()}, "float32"),
        (lambda p: {k: torch.full_like(v, 7.5) for k, v in p.items()}, "not a re-indexing"),
        (lambda p: [p], "not a dict"),
    ],
    ids=["add", "scale", "stored", "sum-of-two", "cast", "a-constant", "not-a-dict"],
)
def test_a_mapping_that_computes_or_reads_values_from_elsewhere_is_refused(cheat, why):
    codes = coded(_saved())
    with pytest.raises(NotAMapping, match=why):
        index_map(codes, cheat(codes.tensors))


def test_codes_are_drawn_anew_each_time():
    a, b = coded(_saved()), coded(_saved())
    assert not torch.equal(a.table, b.table)
    with pytest.raises(NotAMapping):  # a table learnt from one draw is no use on the next
        index_map(b, a.tensors)


def test_a_wrapped_submodules_parameters_are_its_modules(tmp_path):
    """``torch.compile`` of a submodule (or a checkpoint wrapper) puts its parameters one name
    deeper; they are the module's own."""
    from infrarsi.trial.evaluation.remap import load_saved

    saved = {"blocks.0.mlp._orig_mod.fc.weight": torch.ones(2), "wte.weight": torch.zeros(2)}
    torch.save(saved, tmp_path / "final.pt")
    assert set(load_saved(tmp_path / "final.pt")) == {"blocks.0.mlp.fc.weight", "wte.weight"}
