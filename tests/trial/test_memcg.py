"""Per-rank memory cgroups: finding the hierarchy, reading a rank's peak and OOM kills, and
never losing a rank's peak or recording it as 0."""

import os
import subprocess

import pytest

from infrarsi.sandbox import memcg
from infrarsi.sandbox.process import ProcessResult
from infrarsi.trial.classify import _peaks
from infrarsi.trial.metrics import RankReport, reduce_ranks

V1_CGROUP = "9:name=systemd:/\n4:memory:/jobs/abc\n0::/\n"
V2_CGROUP = "0::/user.slice/job\n"
MOUNTINFO = (
    "30 25 0:27 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n"
    "31 25 0:28 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)


def test_own_cgroup_prefers_the_v1_memory_controller():
    assert memcg._own_cgroup(V1_CGROUP) == (1, "/jobs/abc")
    assert memcg._own_cgroup(V2_CGROUP) == (2, "/user.slice/job")
    assert memcg._own_cgroup("5:cpu:/\n") is None


def test_mount_points_of_each_version():
    assert str(memcg._mount_point(MOUNTINFO, 1)) == "/sys/fs/cgroup/memory"
    assert str(memcg._mount_point(MOUNTINFO, 2)) == "/sys/fs/cgroup/unified"
    assert memcg._mount_point("", 1) is None


@pytest.mark.parametrize(
    "version,files",
    [
        (
            1,
            {
                "memory.max_usage_in_bytes": "123456\n",
                "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
            },
        ),
        (
            2,
            {
                "memory.peak": "123456\n",
                "memory.events": "low 0\nhigh 0\nmax 4\noom 1\noom_kill 2\noom_group_kill 0\n",
            },
        ),
    ],
)
def test_read_rank_of_each_version(tmp_path, version, files):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert memcg.read_rank(tmp_path, version) == memcg.RankMemory(123456, 2)


def _result(**kw):
    return ProcessResult(returncode=0, timed_out=False, wall_s=1.0, **kw)


def test_a_rank_without_a_measurement_is_null_with_a_warning_never_zero():
    reports = [
        RankReport(
            rank=r,
            world_size=2,
            steps=[{"step_time_s": 0.1, "loss": 1.0}],
            end={"peak_mem_bytes": 5},
        )
        for r in range(2)
    ]
    reduced = reduce_ranks(reports)
    peaks, source, warnings = _peaks(reports, reduced, _result(), {0: memcg.RankMemory(100, 0)})
    assert peaks == [100, None] and source == "memcg"
    assert "rank(s) [1]" in warnings[0]
    peaks, source, warnings = _peaks(reports, reduced, _result(outside_peak_rss_bytes={1: 7}), None)
    assert peaks == [None, 7] and source == "rss_sampled" and warnings


def _hierarchy():
    hierarchy = memcg.available()
    if hierarchy is None:
        pytest.skip(f"no writable memory cgroup here: {memcg.detect.__doc__}")
    return hierarchy


def test_a_real_rank_cgroup_records_its_peak_and_is_removed():
    cgroup = memcg.TrialCgroup(_hierarchy(), "unit-test")
    env = {
        **os.environ,
        **cgroup.env(),
        "LOCAL_RANK": "0",
        "RANK": "0",
        "PYTHONPATH": str(memcg.Path(memcg.__file__).parent / "_hooks"),
    }
    code = "b = bytearray(64 * 2**20)\nfor i in range(0, len(b), 4096): b[i] = 1"
    subprocess.run(["python3", "-c", code], env=env, check=True)
    ranks = cgroup.ranks()
    cgroup.remove()
    assert list(ranks) == [0] and ranks[0].peak_bytes > 64 * 2**20 and ranks[0].oom_kills == 0
    assert not cgroup.path.exists()


def test_stale_trial_cgroups_of_a_dead_owner_are_swept():
    hierarchy = _hierarchy()
    stale = hierarchy.path / f"{memcg.PREFIX}999999999-old"
    stale.mkdir()
    (stale / "rank0").mkdir()
    mine = memcg.TrialCgroup(hierarchy, "live")
    try:
        assert memcg.sweep_stale(hierarchy, lambda pid: pid == os.getpid()) >= 1
        assert not stale.exists() and mine.path.exists()
    finally:
        mine.remove()


def test_a_cgroup_whose_memory_controller_cannot_be_enabled_is_none_and_left_clean(
    tmp_path, monkeypatch
):
    # a cgroup v2 parent that does not hand the memory controller down (an H200 host: the new
    # cgroup had no cgroup.subtree_control to write) makes no trial cgroup; the trial runs and
    # its peak comes from elsewhere, never an internal error
    (tmp_path / "cgroup.subtree_control").mkdir()  # writing it fails as the kernel's would
    monkeypatch.setattr(memcg, "available", lambda: memcg.Hierarchy(2, tmp_path))
    with memcg.trial_cgroup("t1", lambda pid: True) as cgroup:
        assert cgroup is None
    assert [p.name for p in tmp_path.iterdir()] == ["cgroup.subtree_control"]
