"""The channel a trial's metrics reach the harness by, timed by the harness's clock on arrival.

A rank reports its own step times; a forged metrics line, a patched clock, lines held back, or
a file rewritten after the fact would make them say what the harness did not see. So the
harness opens the channel itself and keeps what arrives, as it arrives:

- probe workloads: a Unix socket in the trial's folder (the harness hands its path to the
  ranks in ``INFRARSI_METRICS_SOCKET``; a trial has a network namespace of its own, where no
  abstract socket of the harness's is seen, and only its own folder); each rank's connection
  is read line by line and every line is parsed once, on arrival, and timed then. What the
  harness parses is what it timed: no second reader with other rules;
- stdout workloads: the launchers' standard output is a pipe the harness reads; each line is
  timed on arrival, and the step-time pattern picks the step lines.

Every line is also written to the trial's folder for people to read (``metrics.rank<N>.jsonl``,
``stdout.log``), and the metrics files are written again from what arrived when the trial
ends: the metrics are always the channel's, never a file the workload could rewrite. The span
from a probe's ``start`` line (or a stdout workload's first step line) to its last step line
bounds the training time the ranks may claim (see ``infrarsi.verify``).
"""

from __future__ import annotations

import json
import re
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infrarsi.trial.metrics import MetricsError, RankReport, read_stdout
from infrarsi.unixpath import at_path
from infrarsi.workloads.stdout import StdoutMetrics

POLL_S = 0.01  # the resolution of the arrival times (lines are read as they come; this is
# what the verification allows for the reader thread's scheduling)


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
    last_step_at_s: float = 0.0  # seconds from launch to the last step line, any stream


class MetricsChannel:
    """Receives a trial's metrics: ``start`` before launch, ``stop`` after every process ended;
    ``env`` is what the ranks need to find it; ``stdout_line`` is fed by the launchers' pipes."""

    def __init__(
        self,
        trial_dir: Path,
        step_pattern: str | None = None,
        tcp_host: str | None = None,
        read_stderr: bool = False,
    ) -> None:
        self.trial_dir = Path(trial_dir)
        self.probe = step_pattern is None
        self._step_regex = re.compile(step_pattern.encode()) if step_pattern else None
        self.t0 = time.monotonic()
        self.started_s: dict[str, float] = {}
        self.steps_s: dict[str, list[float]] = {}
        self.entries: dict[int, list[dict[str, Any]]] = {}  # rank -> the probe's entries, in order
        self.problems: list[str] = []
        self.read_stderr = read_stderr  # the launchers' standard error carries metrics too
        self._lines: list[tuple[float, bytes, str]] = []  # (arrival s, line, stream)
        self._lock = threading.Lock()
        self._readers: list[threading.Thread] = []
        self._halt = threading.Event()
        self._path = self.trial_dir / f".metrics-{secrets.token_hex(4)}.sock"
        self._servers: list[socket.socket] = []
        self._acceptors: list[threading.Thread] = []
        self.tcp_host = tcp_host  # also listen there: ranks on other hosts report through it
        self._tcp_port: int | None = None

    @classmethod
    def for_stdout(
        cls, trial_dir: Path, step_pattern: str, read_stderr: bool = False
    ) -> MetricsChannel:
        """The launchers' standard output (and error, with ``read_stderr``), step lines matched
        by the step-time pattern."""
        return cls(trial_dir, step_pattern, read_stderr=read_stderr)

    def env(self) -> dict[str, str]:
        """What a rank's probe on this host needs to find the channel."""
        return {"INFRARSI_METRICS_SOCKET": str(self._path)} if self.probe else {}

    def remote_env(self) -> dict[str, str]:
        """What a rank's probe on another host needs (the TCP listener; after ``start``)."""
        return (
            {"INFRARSI_METRICS_SOCKET": f"tcp:{self.tcp_host}:{self._tcp_port}"}
            if self.probe and self._tcp_port
            else {}
        )

    def start(self) -> None:
        """Open the socket (probe workloads) and start accepting the ranks' connections."""
        self.t0 = time.monotonic()
        if not self.probe:
            return
        local = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        at_path(local.bind, str(self._path))
        self._servers.append(local)
        if self.tcp_host is not None:
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tcp.bind((self.tcp_host, 0))
            self._tcp_port = tcp.getsockname()[1]
            self._servers.append(tcp)
        for server in self._servers:
            server.listen(256)
            server.settimeout(0.1)
            acceptor = threading.Thread(target=self._accept, args=(server,), daemon=True)
            acceptor.start()
            self._acceptors.append(acceptor)

    def stop(self) -> None:
        """Stop accepting, read what is left (the trial's processes are gone), and write the
        metrics files again from what arrived."""
        self._halt.set()
        for acceptor in self._acceptors:
            acceptor.join(timeout=2)
        for server in self._servers:
            server.close()
        self._path.unlink(missing_ok=True)
        for reader in self._readers:
            reader.join(timeout=2)
        if self.probe:
            self._write_files()

    def stdout_line(self, line: bytes, stream: str = "stdout") -> None:
        """One line of a launcher's standard output (or error: ``stream``), as it arrives."""
        now = time.monotonic() - self.t0
        with self._lock:
            self._lines.append((now, line, stream))
            if stream != "stdout" and not self.read_stderr:
                return
            if self._step_regex is not None and self._step_regex.search(line):
                self.steps_s.setdefault("stdout", []).append(now)

    def lines(self) -> list[tuple[float, str, str]]:
        """Every line the launchers printed: (arrival in seconds since the launch, text,
        stream: "stdout" or "stderr")."""
        with self._lock:
            return [(t, b.decode(errors="replace"), where) for t, b, where in self._lines]

    def stdout_text(self) -> str:
        """What the launchers printed where the metrics are read (standard output, and error
        with ``read_stderr``), in the order it arrived."""
        with self._lock:
            read = [b for _, b, where in self._lines if where == "stdout" or self.read_stderr]
        return b"".join(read).decode(errors="replace")

    def reports(self, stdout_spec: StdoutMetrics | None = None) -> list[RankReport]:
        """The ranks' reports from what arrived; MetricsError naming what is wrong."""
        if not self.probe:
            if stdout_spec is None:
                raise MetricsError("a workload read from its output needs its stdout patterns")
            with self._lock:
                arrivals = list(self.steps_s.get("stdout", []))
            return read_stdout(self.stdout_text(), stdout_spec, arrivals)
        if self.problems:
            raise MetricsError("; ".join(self.problems[:3]))
        reports = []
        for rank, entries in sorted(self.entries.items()):
            report = RankReport(rank=rank)
            for entry in entries:
                if entry["kind"] == "start":
                    report.world_size = int(entry.get("world_size", 1))
                    report.device = str(entry.get("device", "cpu"))
                elif entry["kind"] == "step":
                    report.steps.append(entry)
                elif entry["kind"] == "end":
                    report.end = entry
            reports.append(report)
        return reports

    def _accept(self, server: socket.socket) -> None:
        while not self._halt.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            reader = threading.Thread(target=self._read, args=(conn,), daemon=True)
            reader.start()
            self._readers.append(reader)

    def _read(self, conn: socket.socket) -> None:
        """One rank's stream: the first line says which rank it is; every line is parsed and
        timed as it arrives."""
        rank, stream, files = None, conn.makefile("rb"), None
        try:
            for n, line in enumerate(stream, 1):
                now = time.monotonic() - self.t0
                try:
                    entry = json.loads(line)
                    kind = entry["kind"]
                except (ValueError, KeyError, TypeError):
                    self._problem(
                        f"rank {rank} sent a line that is not a probe record "
                        f"(line {n}: {line[:80]!r})"
                    )
                    continue
                if rank is None:
                    rank = self._claim(entry)
                    if rank is None:
                        return
                    files = open(self.trial_dir / f"metrics.rank{rank}.jsonl", "ab")
                assert files is not None  # opened with the first line that named its rank
                files.write(line if line.endswith(b"\n") else line + b"\n")
                files.flush()
                self._note(rank, kind, entry, now)
        finally:
            if files is not None:
                files.close()
            conn.close()

    def _claim(self, entry: dict[str, Any]) -> int | None:
        """The rank a stream's first line names; None (and a problem) when it is not a start
        line or another stream already claimed that rank."""
        if entry.get("kind") != "start":
            self._problem(f"a metrics stream began with {entry.get('kind')!r}, not 'start'")
            return None
        rank = int(entry.get("rank", 0))
        with self._lock:
            if rank in self.entries:
                self.problems.append(f"two metrics streams claim rank {rank}")
                return None
            self.entries[rank] = []
        return rank

    def _note(self, rank: int, kind: str, entry: dict[str, Any], now: float) -> None:
        name = f"rank{rank}"
        with self._lock:
            self.entries[rank].append(entry)
            if kind == "start":
                self.started_s.setdefault(name, now)
            elif kind == "step":
                self.steps_s.setdefault(name, []).append(now)

    def _problem(self, text: str) -> None:
        with self._lock:
            self.problems.append(text)

    def _write_files(self) -> None:
        for rank, entries in self.entries.items():
            path = self.trial_dir / f"metrics.rank{rank}.jsonl"
            path.write_text("".join(json.dumps(e) + "\n" for e in entries))

    def step_times(self) -> list[float | None]:
        """Each step's time by the harness's clock: from the previous step's line (or the
        probe's start line) to this one, the slowest stream's; None where it cannot be known
        (the first step of a stdout workload)."""
        per_stream = []
        for name, arrivals in self.steps_s.items():
            previous = [self.started_s.get(name)] + arrivals[:-1]
            per_stream.append(
                [a - p if p is not None else None for a, p in zip(arrivals, previous)]
            )
        if not per_stream or len({len(times) for times in per_stream}) != 1:
            return []
        return [max((t for t in step if t is not None), default=None) for step in zip(*per_stream)]

    def timing(self) -> OutsideTiming | None:
        """The longest span of any stream, or None when no step was seen."""
        spans = []
        for name, arrivals in self.steps_s.items():
            if self.probe and name in self.started_s:
                spans.append(OutsideTiming(arrivals[-1] - self.started_s[name], len(arrivals)))
            elif not self.probe and len(arrivals) > 1:
                spans.append(OutsideTiming(arrivals[-1] - arrivals[0], len(arrivals) - 1))
        longest = max(spans, key=lambda t: t.span_s, default=None)
        if longest is not None:
            longest.step_times_s = self.step_times()
            longest.last_step_at_s = max(a[-1] for a in self.steps_s.values() if a)
        return longest
