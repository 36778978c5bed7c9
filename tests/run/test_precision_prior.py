"""The precision prior: what the host's measured matmul peaks say of a change of precision."""

import math
from pathlib import Path

import pytest

from infrarsi.run.problem import PRECISION_PRIOR_LOG
from infrarsi.run.problem_build import precision_prior
from infrarsi.run.space import Config
from infrarsi.workloads import find

FP32 = Config.of({"micro_batch": 2, "precision": "fp32"})
BF16 = Config.of({"micro_batch": 2, "precision": "bf16"})


@pytest.mark.parametrize(
    "bf16_over_fp32, claim",
    [(6.2, PRECISION_PRIOR_LOG), (1.1, 0.0), (0.01, -PRECISION_PRIOR_LOG)],
)
def test_a_precision_is_claimed_faster_or_slower_by_the_hosts_measured_peaks(bf16_over_fp32, claim):
    prior = precision_prior(
        find("dense-1node"), FP32, {"fp32": 1e11, "bf16": 1e11 * bf16_over_fp32}
    )
    assert prior is not None
    assert list(prior([FP32, BF16])) == pytest.approx([0.0, claim])
    # from a bf16 baseline, fp32 is claimed the other way
    back = precision_prior(find("dense-1node"), BF16, {"fp32": 1e11, "bf16": 1e11 * bf16_over_fp32})
    assert back is not None and list(back([FP32])) == pytest.approx([-claim])


def test_no_claim_without_peaks_a_precision_knob_or_where_the_doctor_measured_one():
    peaks = {"fp32": 1e11, "bf16": 6e11}
    assert precision_prior(find("dense-1node"), FP32, None) is None
    assert precision_prior(find("dense-1node"), FP32, {"bf16": 6e11}) is None
    measured = [({"precision": "bf16"}, math.log(1.4))]  # the Doctor's calibration ran bf16
    assert precision_prior(find("dense-1node"), FP32, peaks, measured) is None
    split = [({"micro_batch": 4}, math.log(0.9))]  # another split measured: bf16 still claimed
    assert precision_prior(find("dense-1node"), FP32, peaks, split) is not None


def test_a_true_bool_knob_selects_bf16_in_its_drafted_spelling():
    # a drafted user script's manifest: ``--bf16``, a bool knob, its values strings in a table
    drafted = find(str(Path(__file__).parents[2] / "bench/data/manifests/train-61e9cec0"))
    base = Config.of({"micro_batch": 4, "bf16": "False"})
    prior = precision_prior(drafted, base, {"fp32": 1e11, "bf16": 6e11})
    assert prior is not None
    claims = prior([base, Config.of({"micro_batch": 4, "bf16": True})])
    assert list(claims) == pytest.approx([0.0, PRECISION_PRIOR_LOG])


def test_a_live_run_claims_bf16_from_the_doctors_peaks_until_its_calibration_measured_it():
    from types import SimpleNamespace

    from infrarsi.records import DOCTOR_BASELINE_LABEL
    from infrarsi.run.problem_build import host_priors
    from infrarsi.workloads import knobs

    manifest = find("dense-1node")
    base = knobs.resolve(manifest, "tiny", {})
    baseline = Config.of({k: base[k] for k in ("micro_batch", "precision")})
    run = lambda label, t, **changed: SimpleNamespace(  # noqa: E731
        label=label, ranked_time_per_step_s=t, knobs={**base, **changed}
    )
    hardware = {"peak_flops": {"fp32": 1e11, "bf16": 6e11}}
    report = SimpleNamespace(hardware=hardware, trials=[run(DOCTOR_BASELINE_LABEL, 0.1)])
    measured, precision = host_priors(manifest, "tiny", report, baseline)
    assert measured is None and precision is not None
    assert list(precision([BF16])) == pytest.approx([PRECISION_PRIOR_LOG])
    report.trials.append(run("calibration bf16", 0.07, precision="bf16"))
    measured, precision = host_priors(manifest, "tiny", report, baseline)
    assert precision is None and measured is not None
    assert list(measured([BF16])) == pytest.approx([math.log(0.7)])
