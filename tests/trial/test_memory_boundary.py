"""The capacity and the recorded peak are one quantity: a cap sweep around the uncapped peak
gives only ``ok``/``oom``, monotone, with the boundary at the peak. Three caps a workload: far
below (the rank cannot even import torch), a tenth below and a tenth above the peak (the sweep
had 0.7 and 1.5 too: a cap between two that agree adds no boundary, and each cost a trial)."""

import pytest
from conftest import assert_no_leftovers

from infrarsi.trial import TrialStatus, prepare, run_trial
from infrarsi.workloads import find

pytestmark = pytest.mark.slow
BELOW = (0.1, 0.9)  # 0.1: the rank cannot even import torch
ABOVE = (1.1,)


@pytest.mark.parametrize("name", ["dense-1node", "moe-1node"])
def test_cap_sweep_is_oom_below_the_peak_and_ok_above(tiny_baseline, tmp_path, name):
    manifest = find(name)
    uncapped = tiny_baseline(name)  # the session's uncapped baseline of this workload
    assert uncapped.status is TrialStatus.OK, uncapped.error
    peaks = uncapped.metrics.peak_mem_bytes
    assert uncapped.metrics.peak_mem_source == "memcg"
    assert all(p is not None and p > 50 * 2**20 for p in peaks), peaks
    peak = max(peaks)
    seen = {}
    for factor in BELOW + ABOVE:
        record = run_trial(
            prepare(manifest, "tiny", {}, mem_cap_bytes=int(factor * peak)), tmp_path
        )
        assert_no_leftovers(record.trial_id)
        seen[factor] = (record.status.value, record.error)
    assert {f: s for f, (s, _) in seen.items()} == {
        **{f: "oom" for f in BELOW},
        **{f: "ok" for f in ABOVE},
    }, seen
    assert all("ran out of memory" in seen[f][1] for f in BELOW)
