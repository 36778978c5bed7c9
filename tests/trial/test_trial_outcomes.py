"""Every way a trial can end, on a toy job: each ends in exactly one status, leaving nothing."""

import shutil

import psutil
import pytest
from conftest import FIXTURES, assert_no_leftovers

from infrarsi.trial import TrialStatus, prepare, run_trial
from infrarsi.workloads import load_manifest

pytestmark = pytest.mark.slow
STRAY = ["sleep", "3600.25"]


def _run(manifest, tmp_path, **knobs_and_options):
    options = {
        k: knobs_and_options.pop(k)
        for k in ("mem_cap_bytes", "timeout_s", "slow_after_s", "censored_step_time_s")
        if k in knobs_and_options
    }
    record = run_trial(prepare(manifest, "tiny", knobs_and_options, **options), tmp_path)
    assert_no_leftovers(record.trial_id)
    assert (tmp_path / record.trial_id / "record.json").is_file()
    return record


def test_hang_ends_timeout(toy, tmp_path):
    record = _run(toy, tmp_path, mode="hang", timeout_s=8)
    assert record.status is TrialStatus.TIMEOUT
    assert "no exit after 8 s" in record.error
    assert record.metrics is None and 8 <= record.cost_s < 30


def test_a_trial_past_the_search_bound_is_cut_short_as_slow_and_costs_what_it_ran(toy, tmp_path):
    record = _run(
        toy, tmp_path, mode="hang", timeout_s=120, slow_after_s=4, censored_step_time_s=0.25
    )
    assert record.status is TrialStatus.SLOW and record.slow_after_s == 4
    # built with the time it is at least (right-censored), not amended afterwards
    assert record.censored_time_per_step_s == 0.25
    assert "cut short after 4.0 s" in record.error
    assert record.metrics is None and 4 <= record.cost_s < 30  # not its 120 s timeout


def test_crash_ends_crash_with_the_error_tail(toy, tmp_path):
    record = _run(toy, tmp_path, mode="crash")
    assert record.status is TrialStatus.CRASH
    assert "ValueError: toy crash at step 1" in record.error


def test_pytorch_allocation_beyond_the_cap_is_oom(toy, tmp_path):
    record = _run(toy, tmp_path, mode="alloc", alloc_mb=512, mem_cap_bytes=400 * 2**20)
    assert record.status is TrialStatus.OOM
    assert "ran out of memory" in record.error and "capacity 419430400 bytes" in record.error
    assert record.mem_cap_bytes == 400 * 2**20


@pytest.fixture(scope="module")
def plain(toy, tmp_path_factory):
    """One plain training run of the toy, what both kinds of shared memory are compared with."""
    return _run(toy, tmp_path_factory.mktemp("plain"), mode="train")


@pytest.mark.parametrize("mode", ["shm", "devshm"])
def test_shared_memory_a_rank_creates_is_counted_and_capped(toy, plain, tmp_path, mode):
    hidden = _run(toy, tmp_path, mode=mode, alloc_mb=200)
    assert plain.status is hidden.status is TrialStatus.OK, hidden.error
    grown = [h - p for h, p in zip(hidden.metrics.peak_mem_bytes, plain.metrics.peak_mem_bytes)]
    assert all(g > 190 * 2**20 for g in grown), grown
    cap = plain.metrics.max_peak_mem_bytes + 100 * 2**20
    capped = _run(toy, tmp_path, mode=mode, alloc_mb=200, mem_cap_bytes=cap)
    assert capped.status is TrialStatus.OOM, capped.error


def test_same_allocation_under_a_larger_cap_is_ok(toy, tmp_path):
    record = _run(toy, tmp_path, mode="alloc", alloc_mb=64, mem_cap_bytes=1024 * 2**20)
    assert record.status is TrialStatus.OK, record.error
    assert min(record.metrics.peak_mem_bytes) > 64 * 2**20


def _strays() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == STRAY]


@pytest.mark.parametrize("owned_by", ["root", "user", "subreaper"], indirect=True)
def test_a_process_that_outlives_its_launcher_makes_the_trial_invalid_and_is_killed(
    toy, tmp_path, owned_by
):
    """A rank leaves a grandchild in a session of its own with the trial's id renamed in its
    environment (a sweep by id misses it): it is still in the trial's PID namespace (as root,
    or in a user namespace when not) or, with no namespace, still the descendant of the
    trial's init (its subreaper); the trial is invalid, and nothing of it is left."""
    assert not _strays()
    record = _run(toy, tmp_path, mode="stray")
    assert not _strays(), "a process of the trial outlived it"
    assert record.status is TrialStatus.INVALID, record.error
    assert "process(es) of the trial were still alive" in record.error
    assert record.ownership == owned_by
    assert record.isolation.startswith(
        "off: INFRARSI_OWNERSHIP" if "subreaper" in owned_by else "namespace"
    )


def test_fewer_steps_is_invalid(toy, tmp_path):
    record = _run(toy, tmp_path, mode="fewer_steps")
    assert record.status is TrialStatus.INVALID
    assert "ran 3 optimizer steps; the workload fixes 4" in record.error


def test_tokens_per_step_differing_is_invalid(tmp_path):
    root = tmp_path / "toy"
    shutil.copytree(FIXTURES / "toy", root)
    text = (root / "workload.yaml").read_text().replace("tokens: 32", "tokens: 64")
    (root / "workload.yaml").write_text(text)
    record = _run(load_manifest(root), tmp_path / "trials")
    assert record.status is TrialStatus.INVALID
    assert "tokens per optimizer step 32; the workload fixes 64" in record.error


def test_metrics_read_from_stdout(tmp_path):
    manifest = load_manifest(FIXTURES / "toy-stdout")
    record = _run(manifest, tmp_path, mode="print", sleep_ms=200)  # steps longer than a poll
    assert record.status is TrialStatus.OK, record.error
    assert len(record.metrics.loss) == 4
    assert len(record.metrics.peak_mem_bytes) == 2  # both ranks, measured by the harness
    assert all(b > 0 for b in record.metrics.peak_mem_bytes)
    # stdout lines timed as they arrived: the three steps after the first, 0.2 s each
    assert record.metrics.outside_span_steps == 3
    assert 0.5 < record.metrics.outside_train_span_s < 3.0


def test_a_script_that_prints_no_time_is_timed_by_its_lines_arrival(tmp_path):
    manifest = load_manifest(FIXTURES / "toy-stdout")
    metrics = manifest.launch.metrics.model_copy(update={"step_time": None})
    manifest = manifest.model_copy(
        update={"launch": manifest.launch.model_copy(update={"metrics": metrics})}
    )
    record = _run(manifest, tmp_path, mode="print", sleep_ms=200)
    assert record.status is TrialStatus.OK, record.error
    times = record.metrics.step_times_s
    assert len(times) == 4 and all(0.15 < t < 2.0 for t in times)  # each step sleeps 0.2 s
    assert times[1:] == pytest.approx(record.metrics.harness_step_times_s[1:])


def test_terminating_the_tool_ends_the_trial_it_was_running(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from infrarsi.sandbox.process import TRIAL_ID_ENV

    tool = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "infrarsi",
            "trial",
            str(FIXTURES / "toy"),
            "--set",
            "mode=hang",
            "--workdir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def trial_procs():
        found = []
        for proc in psutil.process_iter():
            try:
                if (
                    proc.environ().get(TRIAL_ID_ENV, "").startswith("toy-")
                    and proc.status() != psutil.STATUS_ZOMBIE
                ):
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    deadline = time.monotonic() + 30
    while len(trial_procs()) < 3 and time.monotonic() < deadline:  # launcher and two ranks
        time.sleep(0.2)
    assert trial_procs(), "the trial never started"
    tool.send_signal(signal.SIGTERM)
    assert tool.wait(timeout=30) != 0
    assert trial_procs() == []
    (record,) = tmp_path.glob("toy-*/record.json")
    assert '"status": "crash"' in record.read_text() and "interrupted" in record.read_text()


def test_a_script_without_a_seed_parameter_is_challenged_through_its_own_seeding(toy, tmp_path):
    """The toy seeds itself (``torch.manual_seed(0)``, a generator per step): a challenge seed
    offsets every seed it sets, so another seed trains otherwise and the same seed the same."""
    plain = _run(toy, tmp_path)
    first = run_trial(prepare(toy, "tiny", {}, seed=77), tmp_path)
    again = run_trial(prepare(toy, "tiny", {}, seed=77), tmp_path)
    assert first.status is TrialStatus.OK and again.status is TrialStatus.OK, first.error
    assert first.seed == 77 and first.seed_set_by == "bootstrap"
    assert first.metrics.loss == again.metrics.loss
    assert first.metrics.loss != plain.metrics.loss
