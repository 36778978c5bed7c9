"""Rank bootstrap, imported by every Python process of a trial (the harness puts it on PYTHONPATH).

In a rank (a process with ``LOCAL_RANK`` set by the launcher) or when ``INFRARSI_CAP_SELF`` is
set, it caps private writable memory with RLIMIT_DATA at ``INFRARSI_RANK_MEM_CAP_BYTES`` before
anything else is imported, so an allocation beyond the capacity fails inside PyTorch as a CUDA
OOM would. It also records any uncaught exception of the process, classified as an allocation
failure or not, into ``INFRARSI_ERROR_FILE`` (``{rank}`` replaced), for the harness to read.
Only the standard library is used here: it runs before the workload's imports.
"""

import faulthandler
import json
import os
import resource
import sys
import threading
import traceback

_OOM_MARKERS = ("can't allocate memory", "cannot allocate memory", "out of memory",
                "failed to map segment", "bad_alloc", "unable to allocate")


def _is_rank():
    return "LOCAL_RANK" in os.environ or os.environ.get("INFRARSI_CAP_SELF") == "1"


def _cap_memory():
    cap = os.environ.get("INFRARSI_RANK_MEM_CAP_BYTES")
    if cap and _is_rank():
        resource.setrlimit(resource.RLIMIT_DATA, (int(cap), int(cap)))


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
        entry = {"rank": int(os.environ.get("RANK", "0")), "pid": os.getpid(),
                 "type": exc_type.__name__, "message": str(exc)[-2000:],
                 "oom": _is_oom(exc), "traceback": "".join(lines)[-4000:]}
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


_cap_memory()
if _is_rank():
    faulthandler.enable()  # a native abort still shows the Python stack it happened in
_previous_excepthook = sys.excepthook
_previous_thread_excepthook = threading.excepthook
sys.excepthook = _excepthook
threading.excepthook = _thread_excepthook
