"""Rank bootstrap, imported by every Python process of a trial (the harness puts it on PYTHONPATH).

In a rank (a process with ``LOCAL_RANK`` set by the launcher, or the single process of a plain
launch, marked ``INFRARSI_CAP_SELF``) it first moves the process into its own memory cgroup
``$INFRARSI_MEMCG_DIR/rank<RANK>``, with the capacity ``INFRARSI_RANK_MEM_CAP_BYTES`` as its limit,
before anything else is imported: the harness reads the rank's peak memory and any OOM kill
from there (see ``infrarsi.sandbox.memcg``). A rank's own child processes stay in its cgroup.
Every process of a trial asks the kernel to kill it when its parent dies, so a trial never
outlives the tool that started it. It also records any uncaught exception of a rank, classified
as an allocation failure or not, into ``INFRARSI_ERROR_FILE`` (``{rank}`` replaced).
Only the standard library is used here: it runs before the workload's imports.
"""

import ctypes
import faulthandler
import json
import os
import signal
import sys
import threading
import traceback

_OOM_MARKERS = (
    "can't allocate memory",
    "cannot allocate memory",
    "out of memory",
    "failed to map segment",
    "bad_alloc",
    "unable to allocate",
)


_JOINED_ENV = "INFRARSI_MEMCG_JOINED"
_LAUNCHER_PID = "INFRARSI_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1
_LIMIT_FILES = {
    "1": ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"),
    "2": ("memory.max", "memory.swap.max"),
}


def _mark_launcher():
    """A launcher that may start its one rank without ``LOCAL_RANK`` (``accelerate launch``'s
    simple launcher): its children know it by its PID."""
    if os.environ.get("INFRARSI_MARK_LAUNCHER") == "1" and _LAUNCHER_PID not in os.environ:
        os.environ[_LAUNCHER_PID] = str(os.getpid())


def _is_rank():
    return (
        "LOCAL_RANK" in os.environ
        or os.environ.get("INFRARSI_CAP_SELF") == "1"
        or os.environ.get(_LAUNCHER_PID) == str(os.getppid())
    )


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _join_memcg():
    """Move this rank into its own memory cgroup, limited to the capacity; once per rank."""
    base = os.environ.get("INFRARSI_MEMCG_DIR")
    if not base or not _is_rank() or os.environ.get(_JOINED_ENV):
        return
    cap = os.environ.get("INFRARSI_RANK_MEM_CAP_BYTES")
    path = os.path.join(base, "rank" + os.environ.get("RANK", "0"))
    try:
        os.makedirs(path, exist_ok=True)
        if cap:
            memory, swap = _LIMIT_FILES[os.environ.get("INFRARSI_MEMCG_VERSION", "1")]
            _write(os.path.join(path, memory), cap)
            if os.path.exists(os.path.join(path, swap)):  # no swapping past the capacity
                _write(os.path.join(path, swap), cap if swap.endswith("in_bytes") else "0")
        _write(os.path.join(path, "cgroup.procs"), "0")
    except OSError as exc:
        if cap:  # a capacity that cannot be enforced must not pass unnoticed
            sys.stderr.write(f"infrarsi: cannot enforce the memory capacity: {path}: {exc}\n")
            os._exit(97)
        return
    os.environ[_JOINED_ENV] = "1"


def _isolate():
    """A rank sees its own trial only, the rest read-only, no capabilities (when asked)."""
    if (
        os.environ.get("INFRARSI_ISOLATE") != "1"
        or not _is_rank()
        or os.environ.get("INFRARSI_ISOLATED")
    ):
        return
    import infrarsi_isolate

    try:
        infrarsi_isolate.isolate(
            os.environ["INFRARSI_TRIAL_DIR"],
            [p for p in os.environ.get("INFRARSI_HIDE", "").split(os.pathsep) if p],
        )
    except infrarsi_isolate.NamespacesRefused as exc:  # nothing changed: run, and say so
        _write(
            os.path.join(
                os.environ["INFRARSI_TRIAL_DIR"], f"isolation.rank{os.environ.get('RANK', '0')}.txt"
            ),
            str(exc),
        )
        return
    except (OSError, KeyError) as exc:
        sys.stderr.write(f"infrarsi: cannot isolate the rank: {exc}\n")
        os._exit(98)
    os.environ["INFRARSI_ISOLATED"] = "1"


def _die_with_parent():
    """The kernel sends SIGKILL when the parent ends (the tool, or a rank's launcher)."""
    if "INFRARSI_TRIAL_ID" not in os.environ:
        return
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent ended before the request was made
        os._exit(1)


def _is_oom(exc):
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return any(marker in text for marker in _OOM_MARKERS)


def _record(exc_type, exc, tb):
    path = os.environ.get("INFRARSI_ERROR_FILE")
    if not path or not _is_rank():
        return
    try:
        lines = traceback.format_exception(exc_type, exc, tb)
        entry = {
            "rank": int(os.environ.get("RANK", "0")),
            "pid": os.getpid(),
            "type": exc_type.__name__,
            "message": str(exc)[-2000:],
            "oom": _is_oom(exc),
            "traceback": "".join(lines)[-4000:],
        }
        with open(path.replace("{rank}", str(entry["rank"])), "a") as f:
            f.write(json.dumps(entry) + "\n")
    except Exception:  # recording must never hide the original error
        pass


def _excepthook(exc_type, exc, tb):
    _record(exc_type, exc, tb)
    _previous_excepthook(exc_type, exc, tb)


def _thread_excepthook(args):
    if args.exc_type is not SystemExit:
        _record(args.exc_type, args.exc_value, args.exc_traceback)
    _previous_thread_excepthook(args)


_mark_launcher()
_join_memcg()
_isolate()
_die_with_parent()
if _is_rank():
    import infrarsi_seed

    infrarsi_seed.install()  # a challenge seed for a script without a seed parameter
    import infrarsi_params

    infrarsi_params.install()  # the parameters saved through the script's framework
    import infrarsi_observe

    infrarsi_observe.install()  # the training watched through PyTorch's own hooks
if _is_rank():
    faulthandler.enable()  # a native abort still shows the Python stack it happened in
_previous_excepthook = sys.excepthook
_previous_thread_excepthook = threading.excepthook
sys.excepthook = _excepthook
threading.excepthook = _thread_excepthook
