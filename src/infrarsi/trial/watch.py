"""Watching what the ranks report from outside, to time the training by the harness's clock.

A rank reports its own step times; a forged metrics line or a patched clock would make them
look shorter than they were. The harness therefore notes *when* each step's line appears —
a probe file's ``step`` lines, or the stdout lines a manifest's step-time pattern matches —
and when a probe's ``start`` line appears. The span between them bounds the training time the
ranks may claim (see ``infrarsi.verify``). Lines are timed as they arrive, to the polling period.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

POLL_S = 0.01


@dataclass
class OutsideTiming:
    """The span the harness saw a rank train, how many of the reported steps it covers, and
    each step's time by the harness's clock.

    A probe's span runs from its ``start`` line to its last step (every step inside); a stdout
    span runs from the first step line to the last (the steps after the first).
    """
    span_s: float
    steps: int
    step_times_s: list[float | None] = field(default_factory=list)
    last_step_at_s: float = 0.0  # seconds from launch to the last step line, any file


class MetricsWatcher(threading.Thread):
    """Polls files matching ``pattern`` in ``folder``; times start and step lines per file."""

    def __init__(self, folder: Path, pattern: str, is_step: Callable[[bytes], bool],
                 is_start: Callable[[bytes], bool] | None = None) -> None:
        super().__init__(daemon=True)
        self.folder, self.pattern = folder, pattern
        self.is_step, self.is_start = is_step, is_start
        self.t0 = time.monotonic()
        self.started_s: dict[str, float] = {}
        self.steps_s: dict[str, list[float]] = {}
        self._offsets: dict[str, int] = {}
        self._halt = threading.Event()

    @classmethod
    def for_probe(cls, folder: Path) -> "MetricsWatcher":
        """Watch the probe's per-rank JSON-lines files."""
        return cls(folder, "metrics.rank*.jsonl", lambda line: b'"kind": "step"' in line,
                   lambda line: b'"kind": "start"' in line)

    @classmethod
    def for_stdout(cls, folder: Path, step_pattern: str) -> "MetricsWatcher":
        """Watch ``stdout.log`` for the lines the step-time pattern matches."""
        regex = re.compile(step_pattern.encode())
        return cls(folder, "stdout.log", lambda line: regex.search(line) is not None)

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
            if complete:
                self._offsets[path.name] = self._offsets.get(path.name, 0) + len(complete)
                self._note(path.name, complete.splitlines(), time.monotonic() - self.t0)

    def _note(self, name: str, lines: list[bytes], now: float) -> None:
        for line in lines:
            if self.is_start is not None and self.is_start(line):
                self.started_s.setdefault(name, now)
            elif self.is_step(line):
                self.steps_s.setdefault(name, []).append(now)

    def step_times(self) -> list[float | None]:
        """Each step's time by the harness's clock: from the previous step's line (or the
        probe's start line) to this one, the slowest file's; None where it cannot be known
        (the first step of a stdout workload)."""
        per_file = []
        for name, arrivals in self.steps_s.items():
            previous = [self.started_s.get(name)] + arrivals[:-1]
            per_file.append([a - p if p is not None else None
                             for a, p in zip(arrivals, previous)])
        if not per_file or len({len(times) for times in per_file}) != 1:
            return []
        return [max((t for t in step if t is not None), default=None)
                for step in zip(*per_file)]

    def timing(self) -> OutsideTiming | None:
        """The longest span of any watched file, or None when no step was seen."""
        spans = []
        for name, arrivals in self.steps_s.items():
            if self.is_start is not None and name in self.started_s:
                spans.append(OutsideTiming(arrivals[-1] - self.started_s[name], len(arrivals)))
            elif self.is_start is None and len(arrivals) > 1:
                spans.append(OutsideTiming(arrivals[-1] - arrivals[0], len(arrivals) - 1))
        longest = max(spans, key=lambda t: t.span_s, default=None)
        if longest is not None:
            longest.step_times_s = self.step_times()
            longest.last_step_at_s = max(a[-1] for a in self.steps_s.values() if a)
        return longest
