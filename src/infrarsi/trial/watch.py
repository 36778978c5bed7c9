"""Watching the ranks' metrics files from outside, to time the training the ranks report.

A rank reports its own step times; a forged metrics line or a patched clock would make them
look shorter than they were. The harness therefore notes *when* each rank's ``start`` and
``end`` lines appear, by its own clock: the span between them bounds the training time the
rank may claim (see ``infrarsi.verify``).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

POLL_S = 0.02


class MetricsWatcher(threading.Thread):
    """Polls files matching ``pattern`` in ``folder``; first ``start``/last line times per file."""

    def __init__(self, folder: Path, pattern: str) -> None:
        super().__init__(daemon=True)
        self.folder, self.pattern = folder, pattern
        self.t0 = time.monotonic()
        self.started_s: dict[str, float] = {}
        self.last_line_s: dict[str, float] = {}
        self._offsets: dict[str, int] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(POLL_S):
            self.poll()

    def stop(self) -> None:
        """Stop polling after one last look."""
        self._halt.set()
        self.join(timeout=2)
        self.poll()

    def poll(self) -> None:
        for path in self.folder.glob(self.pattern):
            try:
                with open(path, "rb") as f:
                    f.seek(self._offsets.get(path.name, 0))
                    new = f.read()
            except OSError:
                continue
            complete = new[:new.rfind(b"\n") + 1]
            if not complete:
                continue
            now = time.monotonic() - self.t0
            self._offsets[path.name] = self._offsets.get(path.name, 0) + len(complete)
            if b'"kind": "start"' in complete:
                self.started_s.setdefault(path.name, now)
            self.last_line_s[path.name] = now

    def spans_s(self) -> dict[str, float]:
        """Seconds between a file's start line and its last line, as seen from outside."""
        return {name: self.last_line_s[name] - start for name, start in self.started_s.items()
                if name in self.last_line_s}
