"""The trial's init (``_hooks/infrarsi_init.py``) run directly: what a launcher under it sees."""

import json
import os
import subprocess

import pytest

from infrarsi.sandbox import ownership

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


STRAY = """#!/bin/sh
setsid sh -c 'exec sleep 300' &
exit 3
"""


CAN_RUN_ITSELF = "import os, sys; sys.exit(not os.access(sys.executable, os.X_OK))"


def _as_nobody() -> list[str]:
    """The command prefix that runs a process as the unprivileged ``nobody`` (root and
    util-linux's ``setpriv`` needed)."""
    import shutil

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("running a process as another user needs root and setpriv")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.mark.parametrize(
    "way, ready", [("user", "pid network own user"), ("subreaper", "subreaper")]
)
def test_a_user_that_is_not_root_still_owns_every_process_of_its_trial(way, ready):
    """The init run by an ordinary user (``nobody``, no capability): in a user namespace of its
    own, or, where none is had, as the launcher's subreaper — either way the process the
    launcher left in a session of its own is found, counted and killed."""
    import shutil
    import sys
    import tempfile
    from pathlib import Path

    nobody = _as_nobody()
    python = next(
        (
            exe
            for exe in (sys.executable, shutil.which("python3") or "", "/usr/bin/python3")
            if exe
            and subprocess.run([*nobody, exe, "-I", "-S", "-c", CAN_RUN_ITSELF]).returncode == 0
        ),
        None,
    )
    if python is None:
        pytest.skip("no Python here that nobody may run")
    with tempfile.TemporaryDirectory(prefix="infrarsi-nobody-") as folder:
        hooks = Path(folder)  # where nobody may read them (pytest's own are root's alone)
        for name in ("infrarsi_init.py", "infrarsi_isolate.py"):
            shutil.copy(ownership.INIT_SCRIPT.parent / name, hooks / name)
        (hooks / "stray.sh").write_text(STRAY.replace("sleep 300", f"sleep 300 # {hooks.name}"))
        for path in (hooks, *hooks.iterdir()):
            path.chmod(0o755)
        _owned_as_nobody(nobody, python, hooks, way, ready)


def _owned_as_nobody(nobody: list[str], python: str, hooks, way: str, ready: str) -> None:
    driver = (
        "import os, subprocess, sys\n"
        "r, w = os.pipe()\n"
        f"p = subprocess.Popen([sys.executable, '-I', '-S', {str(hooks / 'infrarsi_init.py')!r},"
        f" str(w), '1', 'own', {way!r}, '--', 'sh', {str(hooks / 'stray.sh')!r}], pass_fds=(w,))\n"
        "os.close(w)\n"
        "p.wait()\n"
        "print(p.returncode, os.read(r, 4096).decode().replace(chr(10), '|'))\n"
    )
    done = subprocess.run(
        [*nobody, python, "-I", "-S", "-c", driver], capture_output=True, text=True, cwd="/"
    )
    assert done.returncode == 0, done.stderr
    code, said = done.stdout.split(" ", 1)
    assert code == "3", done  # the launcher's own exit status
    assert said.startswith(f"ready {ready}"), said
    assert "survivors 1" in said, said  # the sleep in a session of its own
    left = subprocess.run(["pgrep", "-f", hooks.name], capture_output=True, text=True)
    assert left.stdout == "", "a process of the trial outlived it"


NETWORK = (
    "import os, time; print(os.readlink('/proc/self/ns/net'), os.readlink('/proc/self/ns/user'),"
    " flush=True); time.sleep(0.5)"
)


@pytest.mark.parametrize("owned_by", ["root", "user"], indirect=True)
def test_a_trials_second_local_launcher_joins_the_first_ones_network(owned_by):
    """Two launchers of one trial on this host (two local nodes): the second's init joins the
    first's network namespace (and, not root, its user namespace first), so their rendezvous
    works there; neither is in the harness's network."""
    inits = ownership.networks(2, spans_hosts=False)
    procs = []
    for init in inits:
        if init.net == "join:":
            init.net = f"join:{procs[0].pid}"
        command, write_fd = init.command(["python3", "-c", NETWORK])
        procs.append(
            subprocess.Popen(
                command, stdout=subprocess.PIPE, text=True, pass_fds=(write_fd,), env=os.environ
            )
        )
        init.started(write_fd)
    seen = [proc.communicate(timeout=60)[0].split() for proc in procs]
    assert [init.survivors() for init in inits] == [0, 0]
    assert [proc.returncode for proc in procs] == [0, 0], seen
    (net, user), (joined_net, joined_user) = seen
    assert (joined_net, joined_user) == (net, user)
    assert net != os.readlink("/proc/self/ns/net")
    assert (user != os.readlink("/proc/self/ns/user")) == ("user namespace" in owned_by)
    assert (
        ownership.summary(inits, spans_hosts=False) == owned_by + " shared by its local launchers"
    )


LOCKED_REMOUNT = """
import sys
sys.path.insert(0, sys.argv[1])
import infrarsi_isolate as iso
target = sys.argv[2]
iso._check(iso._libc.unshare(iso.CLONE_NEWNS), "unshare")
iso._mount(None, "/", None, iso.MS_REC | iso.MS_PRIVATE)
for kept in (0, iso._kept_flags(target)):
    try:
        iso._mount(None, target, None, iso.MS_REMOUNT | iso.MS_BIND | iso.MS_RDONLY | kept)
        print("ok", end=" ")
    except iso.IsolationError:
        print("refused", end=" ")
"""


def test_a_read_only_remount_in_a_user_namespace_keeps_the_mounts_locked_flags(tmp_path):
    """A mount with nosuid, nodev and noexec (as /proc, /sys/fs/cgroup and /dev/shm are on most
    hosts), seen from a user namespace: the kernel refuses a read-only remount that would drop
    those flags, and accepts the one the ranks' isolation makes, which keeps them."""
    import shutil
    import sys

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("making the mount needs root and util-linux's unshare")
    script, target = tmp_path / "remount.py", tmp_path / "locked"
    script.write_text(LOCKED_REMOUNT)
    target.mkdir()
    inner = (
        f"mount --make-rprivate / && mount -t tmpfs -o nosuid,nodev,noexec tmpfs {target} && "
        f"unshare --user --map-root-user {sys.executable} {script} "
        f"{ownership.INIT_SCRIPT.parent} {target}"
    )
    done = subprocess.run(["unshare", "--mount", "sh", "-c", inner], capture_output=True, text=True)
    assert done.stdout.split() == ["refused", "ok"], (done.stdout, done.stderr)
