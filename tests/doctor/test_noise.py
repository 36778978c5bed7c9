import math

import pytest

from infrarsi.doctor.noise import cv, min_detectable_effect, recommended_repeats, warmup_steps


def test_warmup_is_detected_from_the_data():
    assert warmup_steps([5.0, 2.0, 1.0, 1.01, 0.99, 1.0, 1.02, 0.98]) == 2
    assert warmup_steps([1.0, 1.01, 0.99, 1.0, 1.02, 0.98]) == 0
    assert warmup_steps([30.0, 1.0, 1.0, 1.0]) == 1


def test_warmup_never_takes_more_than_half():
    assert warmup_steps([9.0, 8.0, 7.0, 6.0, 1.0, 1.0]) <= 3


def test_more_repeats_detect_smaller_effects():
    assert (
        min_detectable_effect(0.1, 1, 3)
        > min_detectable_effect(0.1, 3, 3)
        > min_detectable_effect(0.1, 5, 3)
    )


def test_mde_is_students_t_at_80_percent_power():
    # df = (3 runs - 1) + 2 * (2 - 1) = 4: t(0.975, 4) = 2.7764, t(0.8, 4) = 0.9410
    assert abs(min_detectable_effect(0.1, 2, 3) - (2.7764 + 0.9410) * 0.1) < 1e-3
    # fewer measured runs: less known about the noise, a larger effect needed
    assert min_detectable_effect(0.1, 3, 2) > min_detectable_effect(0.1, 3, 10)
    # a very well measured noise tends to the normal figure, 1.96 + 0.84
    assert abs(min_detectable_effect(0.1, 2, 10_000) - (1.95996 + 0.84162) * 0.1) < 1e-3


def test_recommended_repeats():
    assert recommended_repeats(0.005, 3) == 1  # (4.303 + 1.061) * sqrt(2) * 0.005 = 0.038
    assert recommended_repeats(0.01, 3) == 2  # n = 1 gives 0.076 > 0.05
    assert recommended_repeats(0.03, 3) == 7
    assert recommended_repeats(1.0, 3) == 10
    assert cv([1.0]) == 0.0 and abs(cv([1.0, 3.0]) - 0.7071) < 1e-3


def test_the_objective_headroom_is_amdahls_bound_on_the_outside_share():
    from infrarsi.doctor.noise import amdahl_bound, cannot_detect, gain_note, outside_share

    # two runs of ~6 s end to end whose timed steps take 0.5 s: start-up is ~92%
    share = outside_share([6.0, 6.2], [0.5, 0.5])
    assert share == pytest.approx(((1 - 0.5 / 6.0) + (1 - 0.5 / 6.2)) / 2)
    bound = amdahl_bound(share)
    assert bound == pytest.approx(1 / share) and bound < 1.1
    assert cannot_detect(bound, 0.12) and not cannot_detect(bound, 0.05)
    assert "at most 1.09x" in gain_note(bound, share, 0.12, 3)
    # a throughput objective compares the steady step: nothing outside, no bound
    assert outside_share([0.1], [0.5]) == 0.0 and amdahl_bound(0.0) is None
    assert not cannot_detect(None, 0.5)
    assert "no bound" in gain_note(None, 0.0, 0.05, 3)


def test_apply_detects_less_than_one_comparison_promises_and_less_among_more_candidates():
    from infrarsi.doctor.noise import apply_detectable_effect

    one = min_detectable_effect(0.1, 10, 10_000)
    assert (
        apply_detectable_effect(0.1, 10, 1)
        < apply_detectable_effect(0.1, 10, 3)
        < (apply_detectable_effect(0.1, 10, 10))
    )
    assert apply_detectable_effect(0.1, 10, 3) > one
    assert apply_detectable_effect(0.1, 10, 3) > apply_detectable_effect(0.1, 20, 3)
    # the sum in log time: (t(1 - 0.05/6, 9) sqrt(1.5/10) + t(0.8, 9) sqrt(19.5)/10) * 0.1
    expected = math.expm1((2.9333 * math.sqrt(0.15) + 0.8834 * math.sqrt(19.5) / 10) * 0.1)
    assert abs(apply_detectable_effect(0.1, 10, 3) - expected) < 1e-3
