"""The trial's init (``_hooks/infrarsi_init.py``) run directly: what a launcher under it sees."""

import json
import os
import subprocess

import pytest

from infrarsi.trial import ownership

SEEN = (
    "import json, os; print(json.dumps([os.getpid(), int(os.readlink('/proc/self')),"
    " [int(p) for p in os.listdir('/proc') if p.isdigit()]]))"
)


@pytest.mark.skipif(not ownership.available(), reason="a PID namespace needs root")
def test_a_launcher_under_the_init_sees_its_own_namespace_in_proc():
    # /proc must agree with the process's own PID: a CUDA driver refuses to start where it
    # does not (cuInit error 304 on an H200 host, and the trial ran on the CPU)
    init = ownership.Init("own")
    command, write_fd = init.command(["python3", "-c", SEEN])
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, pass_fds=(write_fd,), env=os.environ
    )
    init.started(write_fd)
    out, _ = proc.communicate(timeout=60)
    assert init.survivors() == 0
    assert proc.returncode == 0, out
    pid, self_link, listed = json.loads(out)
    assert init.ready.startswith("pid"), init.ready
    assert self_link == pid  # /proc/self is this process, by the namespace's numbering
    assert pid <= 3  # the init is 1, the launcher 2
    assert os.getpid() not in listed  # nothing outside the trial
