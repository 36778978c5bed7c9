"""The init of a trial: the launcher runs under it, in a PID namespace (and, where the trial is
on one host, a network namespace) of its own, so the harness owns every process the trial
starts. Standard library only; run as ``python -I -S infrarsi_init.py STATUS_FD TAIL_S NET MODE
-- COMMAND...``.

- ``NET``: ``own`` (a new network namespace, loopback up: the trial reaches nothing outside it
  and nothing reaches it, abstract sockets included), ``join:<pid>`` (the network namespace of
  that process: the other launchers of a trial spread over local nodes), or ``host``;
- ``MODE``: ``root`` (the harness runs as root: it makes the namespaces itself), ``user`` (not
  root: first a user namespace, in which the caller's user is mapped to root, owns the others —
  the kernel lets an ordinary user make one where ``user.max_user_namespaces`` allows; a launcher
  joining another's network joins its user namespace first) or ``subreaper`` (no namespace: the
  init only reaps, see below);
- the outer process enters the namespaces and forks the namespace's init (PID 1), which forks
  the launcher and reaps every orphan of the trial. A process that leaves its session, renames
  itself or double-forks is still in the namespace and still the init's descendant;
- when the launcher exits, the init waits at most ``TAIL_S`` for the namespace to empty, then
  kills what is left (when the init exits, the kernel kills any process still in it) and writes
  ``survivors N`` to ``STATUS_FD``: how many processes outlived the launcher. Its exit status
  is the launcher's;
- the namespace has a ``/proc`` of its own (a mount namespace whose ``/proc`` lists the
  namespace's processes): a process's view of ``/proc`` must agree with its own PID, or a CUDA
  driver refuses to start (``cuInit`` error 304, "OS call failed", seen on an H200 host: the
  trial then ran on the CPU), and a trial sees no process outside its own;
- before forking, it writes ``ready <what it set up>`` to ``STATUS_FD``;
- where the kernel refuses the namespaces (or ``MODE`` is ``subreaper``), the init makes itself
  the launcher's child subreaper: an orphan of the trial (a double fork, a process that left its
  session) is handed to the init, not to the host's, so every process of the trial stays its
  descendant; after the launcher, the same tail, then every descendant still alive is killed and
  counted (the ``ready`` line says ``subreaper: why``; the trial keeps the host's network).
"""

import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys
import time

CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWUSER = 0x40000000, 0x20000000, 0x10000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
_libc = ctypes.CDLL(None, use_errno=True)


def _fail(what):
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")


def _loopback_up():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def _user_namespace(net):
    """Not root: a user namespace of the trial's own, the caller's user and group mapped to
    root in it (its capabilities there make the other namespaces), or, for a launcher joining
    another's network, that launcher's user namespace. What the ``ready`` line adds."""
    if net.startswith("join:"):
        _setns(f"/proc/{int(net[5:])}/ns/user", CLONE_NEWUSER, "setns(user)")
        return " user"
    uid, gid = os.geteuid(), os.getegid()
    if _libc.unshare(CLONE_NEWUSER) != 0:
        raise _fail("unshare(user)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    return " user"


def _setns(path, kind, what):
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.setns(fd, kind) != 0:
            raise _fail(what)
    finally:
        os.close(fd)


def _network(net):
    """Enter the trial's network namespace; what the ``ready`` line says about it."""
    if net == "own":
        if _libc.unshare(CLONE_NEWNET) != 0:
            raise _fail("unshare(network)")
        _loopback_up()
        return "network own"
    if net.startswith("join:"):
        _setns(f"/proc/{int(net[5:])}/ns/net", CLONE_NEWNET, "setns(network)")
        return "network joined"
    return "network host"


def _own_proc():
    """In the namespace's init: a mount namespace whose ``/proc`` is this PID namespace's.
    Where the kernel refuses, the trial still runs, and its stderr says why."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I: the hooks' folder
    import infrarsi_isolate as iso

    try:
        iso._check(iso._libc.unshare(iso.CLONE_NEWNS), "unshare(mount)")
        iso._mount(None, "/", None, iso.MS_REC | iso.MS_PRIVATE)
        iso._mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError as exc:
        sys.stderr.write(
            f"infrarsi: the trial's PID namespace has the host's /proc ({exc}):"
            " a CUDA driver may refuse to start in it\n"
        )


def _run_launcher(command):
    """In the launcher's process: the signals Python changed back to their defaults, then
    exec."""
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"infrarsi: cannot start {command[0]}: {exc}\n")
        os._exit(127)


def _status_code(status):
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _reap_until(launcher):
    """Reap every child until the launcher has ended; its exit code."""
    while True:
        try:
            pid, status = os.wait()
        except InterruptedError:
            continue
        if pid == launcher:
            return _status_code(status)


def _survivors(tail_s):
    """After the launcher: wait for the namespace to empty (the init has no child left), at
    most ``tail_s``; then kill what is left. How many processes were still alive."""
    deadline = time.monotonic() + tail_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return 0
        if pid == 0:
            time.sleep(0.02)
    os.kill(-1, signal.SIGKILL)  # every process of the namespace but this one
    killed = 0
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return killed
        killed += 1


def owned(net, tail_s, body, on_ready=None, user=False):
    """Run ``body()`` (it must end with ``os._exit`` or an exec) as the first child of a new
    PID namespace's init, in the network ``net`` says (``user``: in a user namespace, for a
    caller that is not root); (its exit code, how many processes outlived it). ``on_ready(what)``
    is told what was set up before anything starts. OSError when the kernel refuses the
    namespaces (nothing was started; the caller may be in a user namespace by then)."""
    users = _user_namespace(net) if user else ""
    network = _network(net)
    if _libc.unshare(CLONE_NEWPID) != 0:
        raise _fail("unshare(pid)")
    if on_ready is not None:
        on_ready(f"pid {network}{users}")
    read, write = os.pipe()
    init = os.fork()
    if init == 0:  # PID 1 of the namespace
        os.close(read)
        _own_proc()
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # a SIGTERM from the harness (a timeout, Ctrl-C) goes on to every process of the trial
        signal.signal(signal.SIGTERM, lambda *_: os.kill(-1, signal.SIGTERM))
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        first = os.fork()
        if first == 0:
            os.close(write)
            body()
            os._exit(0)
        code = _reap_until(first)
        os.write(write, f"{_survivors(tail_s)}\n".encode())
        os._exit(code)
    os.close(write)
    previous = signal.signal(signal.SIGTERM, lambda *_: os.kill(init, signal.SIGTERM))
    try:
        status = _wait_for(init)
    finally:
        signal.signal(signal.SIGTERM, previous)
    with os.fdopen(read, "rb") as f:
        said = f.read().strip()
    return _status_code(status), int(said) if said else 0


def _descendants(root):
    """Every live process below ``root``, read from ``/proc`` (parents before children)."""
    parents = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            parents[int(name)] = int(fields[1])
    below, frontier = [], [root]
    while frontier:
        frontier = [pid for pid, ppid in parents.items() if ppid in frontier]
        below += frontier
    return below


def _reap_all():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _subreaper_survivors(tail_s):
    """As ``_survivors``, without a namespace: the init is the subreaper of every process of
    the trial, so what is left is its descendants; killed until none is left (a process that
    forks meanwhile hands its children to the init too)."""
    deadline, me = time.monotonic() + tail_s, os.getpid()
    while time.monotonic() < deadline:
        _reap_all()
        if not _descendants(me):
            return 0
        time.sleep(0.02)
    seen = set()
    for _ in range(100):
        left = _kill_all(me, signal.SIGKILL)
        if not left:
            break
        seen.update(left)
        time.sleep(0.01)
        _reap_all()
    return len(seen)


def subreaped(tail_s, body, on_ready=None, why=""):
    """``owned`` without namespaces: run ``body()`` as a child of this process, made the
    subreaper of everything the child starts; (its exit code, how many processes outlived
    it)."""
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise _fail("prctl(child subreaper)")
    if on_ready is not None:
        on_ready(f"subreaper: {why}" if why else "subreaper")
    first = os.fork()
    if first == 0:
        body()
        os._exit(0)
    signal.signal(signal.SIGTERM, lambda *_: _kill_all(os.getpid(), signal.SIGTERM))
    code = _reap_until(first)
    return code, _subreaper_survivors(tail_s)


def _kill_all(root, sig):
    """Send ``sig`` to every live process below ``root``; which they were."""
    below = _descendants(root)
    for pid in below:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return below


def _wait_for(pid):
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue


def main(argv):
    status_fd, tail_s, net, mode = int(argv[1]), float(argv[2]), argv[3], argv[4]
    command = argv[argv.index("--") + 1 :]
    os.set_inheritable(status_fd, False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def launcher():
        os.close(status_fd)
        _run_launcher(command)

    def ready(what):
        os.write(status_fd, f"ready {what}\n".encode())

    why = "no namespace asked for"
    if mode != "subreaper":
        try:
            code, survivors = owned(net, tail_s, launcher, ready, user=mode == "user")
            why = ""
        except OSError as exc:
            why = exc.strerror or str(exc)
    if why:
        code, survivors = subreaped(tail_s, launcher, ready, why=why)
    os.write(status_fd, f"survivors {survivors}\n".encode())
    os._exit(code)


if __name__ == "__main__":
    try:
        main(sys.argv)
    except Exception as exc:  # never a traceback in place of the trial's own output
        sys.stderr.write(f"infrarsi: the trial's init failed: {exc}\n")
        os._exit(126)
