"""The dry run of a user's command: a few steps of their script in a copy of its folder, its
stdout lines with the harness's clock, ended after a time limit. It runs the user's code with
a timeout and its own process group; the trial harness's isolation (PID namespace, memory
cap) is not applied to it yet."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from infrarsi.errors import InfraRSIError
from infrarsi.trial.runner import resolve_program

LINK_ABOVE_BYTES = 16 << 20  # a larger file (data, checkpoints) is linked, not copied
SKIP = (".git", "__pycache__", ".infrarsi", ".venv", "venv", "wandb", "out")


class DryRunError(InfraRSIError):
    """The dry run did not start or ended with an error; the message holds its output's tail."""


def dry_run(
    argv: list[str], folder: Path, timeout_s: float
) -> tuple[list[tuple[float, str]], float]:
    """Run ``argv`` in a copy of ``folder``; (its stdout lines with their arrival time in
    seconds since launch, the wall seconds it took). DryRunError when it fails or times out
    before printing anything."""
    with tempfile.TemporaryDirectory(prefix="infrarsi-dry-") as tmp:
        work = Path(tmp) / "work"
        _copy(Path(folder), work)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        argv = [resolve_program(argv[0]), *argv[1:]]
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=work,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        except OSError as exc:
            raise DryRunError(f"the dry run did not start: {exc}") from None
        lines, timed_out = _read(proc, t0, timeout_s)
        wall = time.monotonic() - t0
    if timed_out and not lines:
        raise DryRunError(f"the dry run printed nothing in {timeout_s:.0f} s")
    if proc.returncode not in (0, None) and not timed_out:
        raise DryRunError(f"the dry run ended with exit {proc.returncode}:\n{_why(lines)}")
    return lines, wall


FAILURE = re.compile(r"Traceback|Error|terminate called|Aborted|Killed|Segmentation fault")


def _why(lines: list[tuple[float, str]]) -> str:
    """What a failed run printed that says why: from its first failure line (a traceback, an
    abort — a launcher's summary of its ranks says less), then its last lines."""
    text = [line for _, line in lines]
    first = next((i for i, line in enumerate(text) if FAILURE.search(line)), None)
    head = text[first : first + 12] if first is not None else []
    tail = [line for line in text[-8:] if line not in head]
    return "\n".join(head + (["..."] if head and tail else []) + tail)


def _read(proc: subprocess.Popen, t0: float, timeout_s: float) -> tuple[list, bool]:
    """Every stdout line with its arrival time; the process group killed past the limit."""
    import selectors

    lines: list[tuple[float, str]] = []
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    timed_out = False
    while True:
        left = timeout_s - (time.monotonic() - t0)
        if left <= 0:
            timed_out = True
            break
        if not selector.select(timeout=min(left, 1.0)):
            if proc.poll() is not None:
                break
            continue
        line = proc.stdout.readline()
        if not line:
            break
        for part in line.rstrip("\n").split("\r"):  # progress bars rewrite their line
            if part.strip():
                lines.append((time.monotonic() - t0, part))
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return lines, timed_out


def _copy(src: Path, dst: Path) -> None:
    """The script's folder, large files linked rather than copied."""

    def copy(a: str, b: str) -> None:
        if os.path.getsize(a) > LINK_ABOVE_BYTES:
            os.symlink(os.path.abspath(a), b)
        else:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*SKIP), copy_function=copy)
