"""What a user's own manifest can say: switches present only when true, stdout numbers in
their own units, a tokens-per-step line, roles; and patterns checked when the manifest loads."""

import shutil

import pytest
import yaml
from conftest import FIXTURES

from infrarsi.trial import prepare
from infrarsi.trial.launch import render
from infrarsi.trial.metrics import MetricsError, read_stdout
from infrarsi.workloads import ManifestError, load_manifest, precision_of


@pytest.fixture(scope="module")
def foreign():
    return load_manifest(FIXTURES / "foreign")


def test_a_flag_knob_is_present_when_true_and_absent_when_false(foreign, tmp_path):
    on, _ = render(prepare(foreign, "tiny", {"bf16": "true"}), tmp_path)
    off, _ = render(prepare(foreign, "tiny", {}), tmp_path)
    assert "--bf16" in on and "--bf16" not in off
    assert not any("True" in part or "False" in part for part in on + off)


def test_stdout_numbers_in_their_unit_and_tokens_printed_once(foreign):
    text = (
        "tokens per iter: 256\niter 0: loss 5.7000, time 1041.91ms\n"
        "iter 1: loss 5.6000, time 20.00ms\n"
    )
    (report,) = read_stdout(text, foreign.launch.metrics)
    assert [s["step_time_s"] for s in report.steps] == pytest.approx([1.04191, 0.02])
    assert [s["tokens"] for s in report.steps] == [256, 256]


def test_stdout_counts_that_disagree_are_refused(foreign):
    with pytest.raises(MetricsError, match="2 step times and 1 losses"):
        read_stdout("iter 0: loss 5.7, time 1ms\ntime 2ms\n", foreign.launch.metrics)


def _edited(tmp_path, change):
    root = tmp_path / "w"
    shutil.copytree(FIXTURES / "foreign", root)
    data = yaml.safe_load((root / "workload.yaml").read_text())
    change(data)
    (root / "workload.yaml").write_text(yaml.safe_dump(data))
    return root


@pytest.mark.parametrize(
    "change, says",
    [
        (
            lambda d: d["launch"]["metrics"].update(loss="loss [0-9.]+"),
            "field 'launch.metrics.loss.pattern': 'loss [0-9.]+' has 0 capture groups",
        ),
        (lambda d: d["launch"]["metrics"].update(loss="(loss) ([0-9.]+)"), "has 2 capture groups"),
        (
            lambda d: d["launch"]["metrics"]["step_time"].update(unit="minutes"),
            "field 'launch.metrics.step_time.unit'",
        ),
        (lambda d: d["knobs"][2].update(flag="--attn"), "'flag' is for bool knobs"),
        (
            lambda d: d["launch"]["command"].__setitem__(5, "--bf16={bf16}"),
            "must be a command item of its own",
        ),
        (lambda d: d["knobs"][0].update(role="speed"), "field 'knobs.0.role'"),
    ],
)
def test_manifest_problems_are_found_when_it_loads(tmp_path, change, says):
    with pytest.raises(ManifestError) as err:
        load_manifest(_edited(tmp_path, change))
    assert says in str(err.value)
    assert "literal" not in str(err.value)


def test_precision_comes_from_the_knob_with_that_role(foreign, dense):
    assert precision_of(foreign, {"bf16": True}) == "bf16"
    assert precision_of(foreign, {"bf16": False}) == "fp32"
    assert precision_of(dense, {"precision": "bf16"}) == "bf16"
    assert precision_of(dense, {"precision": "fp32"}) == "fp32"


@pytest.mark.parametrize(
    "spelling, precision",
    [("bfloat16", "bf16"), ("BF16", "bf16"), ("float16", "fp16"), ("half", "fp16")]
    + [("float32", "fp32"), ("no", "fp32"), ("fp32", "fp32")],
)
def test_a_precision_is_read_in_pytorchs_own_spelling_and_the_doctor_calibrates_it(
    spelling, precision
):
    """A user's ``--dtype=bfloat16`` (nanoGPT's spelling) is bf16 to every reader: the
    verification's tolerances, the MFU's peak, the Doctor's bf16 calibration run."""
    from infrarsi.doctor.calibrate import bf16_variant

    drafted = load_manifest(FIXTURES.parent.parent / "bench/data/manifests/train-9ce01a41")
    assert precision_of(drafted, {"dtype": spelling}) == precision
    assert bf16_variant(drafted, "tiny")["dtype"] == "bfloat16"


def test_every_reference_knob_and_patch_has_a_role():
    from infrarsi.workloads import all_reference

    for manifest in all_reference():
        assert all(k.role for k in manifest.knobs), manifest.name
        assert all(p.roles for p in manifest.patches), manifest.name


def test_a_step_longer_than_the_whole_trial_is_refused_naming_the_unit(foreign):
    from infrarsi.sandbox.process import ProcessResult
    from infrarsi.trial.classify import measured

    spec = prepare(foreign, "tiny", {})
    lines = "".join(f"iter {i}: loss 5.0, time 1041.91\n" for i in range(6))  # ms, read as s
    seconds = foreign.launch.metrics.model_copy(
        update={
            "step_time": foreign.launch.metrics.step_time.model_copy(
                update={"pattern": "time ([0-9.]+)", "unit": "s"}
            )
        }
    )
    reports = read_stdout(lines, seconds)
    with pytest.raises(MetricsError, match="longer than the whole trial.*unit: ms"):
        measured(spec, reports, ProcessResult(returncode=0, timed_out=False, wall_s=9.0))
