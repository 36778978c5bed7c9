"""Every reference workload at tiny scale: its baseline, each catalog patch and bf16, for real.

A patch or knob may change how fast the workload runs, never what it computes: the loss
trajectory must stay within the tolerance each manifest states (fp32 tight, bf16 looser).
"""

import hashlib

import pytest

from infrarsi.trial import TrialStatus, prepare, run_trial
from infrarsi.workloads import find, reference_names

pytestmark = pytest.mark.slow


def _cases() -> list[tuple[str, str]]:
    """Each catalog patch once per model it changes: a patch whose diff and model are the same
    bytes on two workloads (the 1-node and 2-node ones share both) runs on the one with the
    most launchers, where its parameters are sharded (FSDP2, expert parallel) — the stricter
    layout; the 1-node loops' patches run in the adversarial and optimize tests too."""
    chosen: dict[bytes, tuple[int, str, str]] = {}
    for w in reference_names():
        manifest = find(w)
        model = (manifest.root / "model.py").read_bytes()
        for p in manifest.patches:
            key = hashlib.sha256(model + b"\0" + manifest.patch_path(p.id).read_bytes()).digest()
            chosen[key] = max(chosen.get(key, (0, "", "")), (manifest.launch.nodes, w, p.id))
    return sorted((w, pid) for _, w, pid in chosen.values())


CASES = _cases()


def rel_drift(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


@pytest.mark.parametrize("name", reference_names())
def test_baseline_runs_on_two_or_more_ranks(tiny_baseline, name):
    record = tiny_baseline(name)
    assert record.status is TrialStatus.OK, record.error
    assert record.metrics.ranks >= 2
    assert len(record.metrics.loss) == find(name).scale("tiny").params["steps"]
    ev = record.evaluation  # full parameters gathered (FSDP2, expert parallel) and evaluated
    assert ev.error is None and ev.initial_eval_loss > ev.eval_loss > 0, ev


@pytest.mark.parametrize("name, patch_id", CASES)
def test_patch_keeps_the_loss_within_tolerance(tiny_baseline, tmp_path, name, patch_id):
    manifest = find(name)
    record = run_trial(prepare(manifest, "tiny", {}, [patch_id]), tmp_path)
    assert record.status is TrialStatus.OK, record.error
    assert [p.id for p in record.patches] == [patch_id]  # the record names what it applied
    assert len(record.patches[0].sha256) == 64
    drift = rel_drift(record.metrics.loss, tiny_baseline(name).metrics.loss)
    assert drift <= manifest.invariants.rtol("fp32"), f"{patch_id}: drift {drift:.2e}"
    _same_held_out_loss(record, tiny_baseline(name), manifest.invariants.rtol("fp32"))


def _same_held_out_loss(record, baseline, rtol):
    """The harness evaluated the saved parameters with the unpatched model code."""
    ours, ref = record.evaluation, baseline.evaluation
    assert ours.error is None and ours.layout_problems == [], ours
    assert abs(ours.eval_loss / ref.eval_loss - 1) <= rtol, (ours.eval_loss, ref.eval_loss)


@pytest.mark.parametrize("name", reference_names())
def test_bf16_stays_within_the_looser_tolerance(tiny_baseline, tmp_path, name):
    manifest = find(name)
    record = run_trial(prepare(manifest, "tiny", {"precision": "bf16"}), tmp_path)
    assert record.status is TrialStatus.OK, record.error
    drift = rel_drift(record.metrics.loss, tiny_baseline(name).metrics.loss)
    assert drift <= manifest.invariants.rtol("bf16", "fp32"), f"bf16 drift {drift:.2e}"
    _same_held_out_loss(record, tiny_baseline(name), manifest.invariants.rtol("bf16", "fp32"))
