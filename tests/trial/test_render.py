"""A trial's launch command and environment, rendered from the manifest's templates."""

from conftest import FIXTURES

from infrarsi.trial import prepare
from infrarsi.trial.launch import render
from infrarsi.workloads import load_manifest


def test_a_thread_count_of_zero_leaves_the_variable_unset(tmp_path):
    manifest = load_manifest(FIXTURES / "toy-stdout")
    launch = manifest.launch.model_copy(
        update={"env": {"OMP_NUM_THREADS": "{sleep_ms}", "TOY_MODE": "{mode}"}}
    )
    manifest = manifest.model_copy(update={"launch": launch})
    _, env = render(prepare(manifest, "tiny", {"sleep_ms": 0}), tmp_path)
    assert "OMP_NUM_THREADS" not in env and env["TOY_MODE"] == "train"  # the launcher's default
    _, env = render(prepare(manifest, "tiny", {"sleep_ms": 200}), tmp_path)
    assert env["OMP_NUM_THREADS"] == "200"
