"""A warm Python for the harness's own checks: PyTorch imported once, each script in a fork.

Evaluating a trial's parameters runs small Python scripts (the mapping to the reference layout,
the workload's evaluation); started cold, each would spend most of its time importing PyTorch.
The server imports it once and forks a fresh child per script, which runs it as ``python
script.py args`` would (``__main__``, its folder first on ``sys.path``, its own working
directory, stdout and stderr to files). The server runs no tensor operation itself, so forking
it is safe; it dies with the harness (parent-death signal). One script at a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infrarsi.host import CACHE_DIR
from infrarsi.sandbox import HOOKS_DIR, ownership
from infrarsi.sandbox.process import _die_with_parent

_SERVER = r"""
import ctypes, json, os, runpy, signal, sys, traceback
import torch  # noqa: F401  (the point: imported once, before any fork)
libc = ctypes.CDLL(None)


def run(job):
    try:
        if job.get("isolate"):
            import infrarsi_isolate
            try:
                infrarsi_isolate.isolate(job["isolate"]["own"], job["isolate"]["hidden"])
            except infrarsi_isolate.NamespacesRefused as exc:  # nothing changed
                sys.stderr.write(f"infrarsi: evaluated without isolation: {exc}\n")
        os.chdir(job["cwd"])
        sys.path.insert(0, job["cwd"])
        sys.argv = job["argv"]
        runpy.run_path(job["argv"][0], run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def owned(job):
    # the script's processes in a PID and network namespace of their own: none outlives it
    sys.path.insert(0, job["isolate"]["hooks"])
    import infrarsi_init
    try:
        code, outlived = infrarsi_init.owned(
            "own", job["isolate"]["tail_s"], lambda: run(job), user=job["isolate"]["user"])
    except OSError as exc:  # no namespace: still every process it starts is the fork's to reap
        code, outlived = infrarsi_init.subreaped(job["isolate"]["tail_s"], lambda: run(job))
    if outlived:
        sys.stderr.write(
            f"infrarsi: {outlived} process(es) the script started outlived it (killed)\n")
        code = code or 125
    os._exit(code)


for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # a fork loses it: die with the server
        out = os.open(job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(err, 2)
        owned(job) if job.get("isolate") else run(job)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
"""


@dataclass
class Completed:
    """How a script ended, and what it printed."""

    returncode: int
    stdout: str
    stderr: str


class EvalServer:
    """The warm process; started on first use, restarted after a timeout or a crash."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def run(
        self,
        script: str,
        args: list[str],
        cwd: Path,
        logs: Path,
        timeout_s: float,
        isolate: dict[str, Any] | None = None,
    ) -> Completed:
        """Run ``python script args`` in ``cwd`` (a fork of the warm process), isolated as
        ``isolation_for`` says when given."""
        with self._lock:
            proc = self._ensure()
            out, err = Path(logs).with_suffix(".out"), Path(logs).with_suffix(".err")
            job = {
                "cwd": str(cwd),
                "argv": [script, *args],
                "stdout": str(out),
                "stderr": str(err),
                "isolate": isolate,
            }
            stdin = proc.stdin
            assert stdin is not None  # started with stdin=PIPE
            stdin.write(json.dumps(job) + "\n")
            stdin.flush()
            reply = self._reply(proc, timeout_s)
            if reply is None:
                self.close()
                raise subprocess.TimeoutExpired([script, *args], timeout_s)
            return Completed(reply["returncode"], _read(out), _read(err))

    def _ensure(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            env = {k: v for k, v in os.environ.items() if not k.startswith("INFRARSI_")}
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _SERVER],
                env=env,
                text=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        return self._proc

    @staticmethod
    def _reply(proc: subprocess.Popen[str], timeout_s: float) -> dict[str, Any] | None:
        result: list[str] = []
        stdout = proc.stdout
        assert stdout is not None  # started with stdout=PIPE
        reader = threading.Thread(target=lambda: result.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        if not result or not result[0].strip():
            return None
        reply: dict[str, Any] = json.loads(result[0])
        return reply

    def close(self) -> None:
        """End the warm process (and any script it is running)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None


def isolation_for(trial_dir: Path) -> dict[str, Any] | None:
    """What a process running this trial's code may see (its trial folder; not the other
    trials nor the harness's cache), or None where no namespace can be had (not root, and no
    user namespace for this user)."""
    if not ownership.available():
        return None
    return {
        "own": str(trial_dir),
        "hooks": str(HOOKS_DIR),
        "tail_s": ownership.OUTLIVE_TAIL_S,
        "user": ownership.mode() == ownership.USER,
        "hidden": [str(Path(trial_dir).resolve().parent), str(CACHE_DIR)],
    }


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


SERVER = EvalServer()
