from infrarsi.doctor.noise import cv, min_detectable_effect, recommended_repeats, warmup_steps


def test_warmup_is_detected_from_the_data():
    assert warmup_steps([5.0, 2.0, 1.0, 1.01, 0.99, 1.0, 1.02, 0.98]) == 2
    assert warmup_steps([1.0, 1.01, 0.99, 1.0, 1.02, 0.98]) == 0
    assert warmup_steps([30.0, 1.0, 1.0, 1.0]) == 1


def test_warmup_never_takes_more_than_half():
    assert warmup_steps([9.0, 8.0, 7.0, 6.0, 1.0, 1.0]) <= 3


def test_more_repeats_detect_smaller_effects():
    assert min_detectable_effect(0.1, 1) > min_detectable_effect(0.1, 3) > \
        min_detectable_effect(0.1, 5)
    assert abs(min_detectable_effect(0.1, 2) - 0.196) < 1e-3


def test_recommended_repeats():
    assert recommended_repeats(0.01) == 1
    assert recommended_repeats(0.03) == 3
    assert recommended_repeats(1.0) == 10
    assert cv([1.0]) == 0.0 and abs(cv([1.0, 3.0]) - 0.7071) < 1e-3
