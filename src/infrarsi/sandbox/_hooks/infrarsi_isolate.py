"""Isolation of a process that runs a trial's code: it sees its own trial and nothing it may
not, and cannot raise its own limits. Standard library only (it runs before any import).

Called in every rank by the bootstrap hook (after the rank joined its memory cgroup), and in
the harness's evaluation children before they run code a patch wrote. As root, the process
moves into a mount namespace of its own where:

- the folders the harness names (the trials root, the hardware cache) are covered by an empty
  tmpfs, and only the process's own trial folder is bound back, writable;
- ``/dev/shm`` is fresh and private (what it keeps there is still charged to its memory
  cgroup); temporary files, the home and cache folders go to its own trial folder (the
  harness sets ``TMPDIR``, ``HOME``, ``XDG_CACHE_HOME``), since ``/tmp`` may hold what it
  needs (a virtualenv, a checkout) and is only made read-only;
- everything else — the file system root, ``/dev`` (its devices still work), ``/proc/sys``,
  the harness's code, the cgroup hierarchies with the rank's own limit — is read-only, so
  nothing one trial writes survives for the next: its own folder is the harness's to read;
- System V shared memory, semaphores and message queues, which outlive the process that made
  them, live in an IPC namespace of its own, gone when its last process ends;

and then gives up every capability (and the means to regain one), so it cannot undo any of it,
raise a hard limit, or trace the harness. Not root, the rank is root of the user namespace the
trial's init made (``infrarsi_init.py``), where the same is done; a rank with no capability at all
is refused a mount namespace and changes nothing (the caller says so).
"""

import ctypes
import os

CLONE_NEWNS, CLONE_NEWIPC = 0x00020000, 0x08000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
CAPABILITY_VERSION_3 = 0x20080522
_libc = ctypes.CDLL(None, use_errno=True)


class IsolationError(OSError):
    """The namespace could not be set up."""


class NamespacesRefused(IsolationError):
    """The kernel refuses a mount namespace here: nothing was changed."""


def _check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise IsolationError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source, target, fstype, flags, data=None):
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def _mount_points():
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f]


def _inside(path, folder):
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def isolate(own_dir, hidden):
    """Enter the namespace: ``own_dir`` writable, ``hidden`` folders covered, the rest
    read-only; then drop every capability. IsolationError when the kernel refuses."""
    own_dir = os.path.realpath(own_dir)
    if _libc.unshare(CLONE_NEWNS | CLONE_NEWIPC) != 0 and _libc.unshare(CLONE_NEWNS) != 0:
        errno = ctypes.get_errno()
        raise NamespacesRefused(errno, f"unshare: {os.strerror(errno)}")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    keep = os.open(own_dir, os.O_RDONLY | os.O_DIRECTORY)  # a handle in this namespace
    covered = []
    for folder in ["/dev/shm"] + [os.path.realpath(h) for h in hidden]:
        if os.path.isdir(folder) and not any(_inside(folder, c) for c in covered):
            _mount("tmpfs", folder, "tmpfs", 0, "mode=1777")
            covered.append(folder)
    os.makedirs(own_dir, exist_ok=True)
    _mount(f"/proc/self/fd/{keep}", own_dir, None, MS_BIND | MS_REC)
    os.close(keep)
    if os.path.isdir("/proc/sys"):  # global kernel settings: one trial could leave them changed
        _mount("/proc/sys", "/proc/sys", None, MS_BIND | MS_REC)
    writable = set(covered) | {own_dir, "/proc"}
    for point in _mount_points():
        if (
            point == "/"
            or point.startswith("/sys")
            or point == "/proc/sys"
            or (point not in writable and not any(_inside(point, w) for w in writable))
        ):
            try:
                _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _kept_flags(point))
            except IsolationError:
                if point in ("/", "/sys/fs/cgroup") or point.startswith("/sys/fs/cgroup/"):
                    raise
    _enter_again(own_dir)
    drop_capabilities()


def _kept_flags(point):
    """The flags a read-only remount of ``point`` must keep: in a user namespace the kernel
    refuses a remount that would drop one (nosuid, nodev, noexec, the access-time ones)."""
    try:
        have = os.statvfs(point).f_flag
    except OSError:
        return 0
    # statvfs's ST_* bit -> mount's MS_* bit (nosuid, nodev, noexec, noatime, nodiratime,
    # relatime)
    pairs = ((2, 2), (4, 4), (8, 8), (1024, 1024), (2048, 2048), (4096, 1 << 21))
    return sum(ms for st, ms in pairs if have & st)


def _enter_again(own_dir):
    """The working directory taken before still points under the covers: enter it again by
    its path (through the new mounts), or the own folder when it is no longer visible."""
    try:
        os.chdir(os.getcwd())
    except OSError:
        os.chdir(own_dir)
    if not _inside(os.getcwd(), own_dir) and not os.path.exists(os.getcwd()):
        os.chdir(own_dir)


def drop_capabilities():
    """No capability left, none to regain: uid 0 without them is an ordinary user here."""
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(_libc.capset(header, data), "capset")
