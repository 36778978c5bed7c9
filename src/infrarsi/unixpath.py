"""Unix socket addresses at any path: standard library only, so the harness's processes (which
bind the metrics channel) and a rank's probe (which connects to it) share it without either
importing more than it needs."""

from __future__ import annotations

import os
from typing import Any


def at_path(call: Any, path: str) -> Any:
    """``call`` (a Unix socket's ``bind`` or ``connect``) at ``path``; a path longer than a
    socket address holds is reached through its folder's descriptor."""
    if len(os.fsencode(path)) < 100:
        return call(path)
    folder = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY)
    try:
        return call(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
    finally:
        os.close(folder)
