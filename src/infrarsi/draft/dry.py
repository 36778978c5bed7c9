"""The dry run of a user's command: a few steps of their script in a copy of its folder, run as
a trial is (its own session and process tree swept at the end, a private home and temporary
folder, the isolation hooks, each rank's memory capped, a timeout), its stdout lines with the
harness's clock on arrival."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from infrarsi.errors import InfraRSIError
from infrarsi.sandbox import memcg
from infrarsi.sandbox.process import Launchers, owner_alive, run_isolated
from infrarsi.trial.launch import OBSERVED, isolated_env, observer_env, resolve_program
from infrarsi.trial.watch import MetricsChannel
from infrarsi.workloads.folder import copy_workload

LINK_ABOVE_BYTES = 16 << 20  # a larger file (data, checkpoints) is linked, not copied
SKIP = ("wandb", "out")  # besides what every copy of a workload leaves out: its outputs
FAILURE = re.compile(r"Traceback|Error|terminate called|Aborted|Killed|Segmentation fault")
TEARDOWN_RACE = "terminate called without an active exception"
ARGUMENT_ERROR = re.compile(r"^\S+: error: (unrecognized arguments|argument |the following)")


class DryRunError(InfraRSIError):
    """The dry run did not start or ended with an error; the message holds what it printed."""


class DryRan(NamedTuple):
    """What a dry run showed: every line it printed as (arrival in seconds since launch, text,
    "stdout" or "stderr"), the wall seconds it took, and its training as PyTorch saw it (the
    observer's records of its first rank: ``sandbox/_hooks/infrarsi_observe.py``)."""

    lines: list[tuple[float, str, str]]
    wall_s: float
    observed: list[dict[str, Any]]

    def steps(self) -> list[dict[str, Any]]:
        """The optimizer steps the observer saw, in order."""
        return [r for r in self.observed if r.get("kind") == "step"]


def dry_run(
    argv: list[str],
    folder: Path,
    timeout_s: float,
    mem_cap_bytes: int | None = None,
    env: dict[str, str] | None = None,
    stop_after: int | None = None,
) -> DryRan:
    """Run ``argv`` in a copy of ``folder`` as a trial runs, its training observed through
    PyTorch (the optimizer's parameters saved as a trial's would be; every rank ended after
    ``stop_after`` optimizer steps where asked). ``mem_cap_bytes``: each rank's memory cap;
    ``env``: the harness's own settings added (what its bootstrap hooks should report).
    DryRunError when it fails, or times out before printing anything."""
    with tempfile.TemporaryDirectory(prefix="infrarsi-dry-") as tmp:
        # the dry run's own folder, one below the temporary one: isolation hides a trial
        # folder's parent (the other trials), which must not be /tmp, where the tool itself or
        # the user's script may live
        root = Path(tmp) / "dry"
        root.mkdir()
        work = root / "work"
        _copy(Path(folder), work)
        argv = [resolve_program(argv[0]), *argv[1:]]
        launch_env = isolated_env(root, argv, {}, mem_cap_bytes) | (env or {})
        launch_env |= observer_env(root, True, stop_after)
        channel = MetricsChannel.for_stdout(root, "(?!)", read_stderr=True)  # every line kept
        trial_id = f"dry-{secrets.token_hex(6)}"
        with memcg.trial_cgroup(trial_id, owner_alive) as cgroup:
            launch_env.update(cgroup.env() if cgroup else {})
            try:
                result = run_isolated(
                    Launchers(commands=[argv], envs=[launch_env], cwd=work, read_stderr=True),
                    trial_id=trial_id,
                    timeout_s=timeout_s,
                    logs=(root / "stdout.log", root / "stderr.log"),
                    channel=channel,
                    cgroup_procs=cgroup.launchers_procs if cgroup else None,
                )
            except OSError as exc:
                raise DryRunError(f"the dry run did not start: {exc}") from None
            oom_kills = sum(m.oom_kills for m in cgroup.ranks().values()) if cgroup else 0
        lines = [
            (t, part, stream)
            for t, line, stream in channel.lines()
            for part in line.rstrip("\n").split("\r")  # progress bars rewrite their line
            if part.strip()
        ]
        observed = _observed(root / OBSERVED.format(rank=0))
    if result.timed_out:
        _timed_out(lines, observed, timeout_s)
    printed = [line for _, line, _ in lines]
    if not result.timed_out and result.returncode != 0 and not teardown_race(printed):
        why = (
            f" (out of memory: past the dry run's cap of {mem_cap_bytes / 2**20:.0f} MiB per "
            "rank; give it less to do, e.g. a smaller batch on the command)"
            if oom_kills and mem_cap_bytes
            else ""
        )
        raise DryRunError(f"the dry run ended with exit {result.returncode}{why}:\n{_why(printed)}")
    return DryRan(lines, result.wall_s, observed)


def _timed_out(lines: list, observed: list[dict[str, Any]], timeout_s: float) -> None:
    """DryRunError for a dry run that did not end in time: what it printed and how many steps
    the observer saw, named a hang — never read as a print format."""
    if not lines:
        raise DryRunError(f"the dry run printed nothing in {timeout_s:.0f} s")
    stepped = sum(r.get("kind") == "step" for r in observed)
    raise DryRunError(
        f"the dry run did not end within {timeout_s:.0f} s: it printed {len(lines)} "
        f"line(s) and its optimizer stepped {stepped} time(s) — a hang (a collective "
        "that never completes, a data loader that blocks) or far more work than a few "
        "steps; its last lines:\n" + "\n".join(text for _, text, _ in lines[-6:])
    )


def _observed(path: Path) -> list[dict[str, Any]]:
    """The observer's records in ``path`` (none where it wrote none)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def teardown_race(printed: list[str]) -> bool:
    """Whether a failed exit is gloo's known teardown race alone: a rank aborted with
    "terminate called without an active exception" as its process ended, no Python error
    raised — the training ran (a trial in this state is classified by its steps, not its exit
    code: ``trial.classify``)."""
    return any(TEARDOWN_RACE in line for line in printed) and not any(
        "Traceback" in line for line in printed
    )


def _why(text: list[str]) -> str:
    """What a failed run printed that says why: the script's own argument error first (a
    mistyped flag: its usage line and error, not the launcher's traceback about it), else from
    its first failure line (a traceback, an abort — a launcher's summary of its ranks says
    less), then its last lines."""
    refused = next((i for i, line in enumerate(text) if ARGUMENT_ERROR.search(line)), None)
    if refused is not None:
        return "\n".join(text[max(0, refused - 1) : refused + 1])
    first = next((i for i, line in enumerate(text) if FAILURE.search(line)), None)
    head = text[first : first + 12] if first is not None else []
    tail = [line for line in text[-8:] if line not in head]
    return "\n".join(head + (["..."] if head and tail else []) + tail)


def _copy(src: Path, dst: Path) -> None:
    """The script's folder, large files linked rather than copied."""

    def copy(a: str, b: str) -> None:
        if os.path.getsize(a) > LINK_ABOVE_BYTES:
            os.symlink(os.path.abspath(a), b)
        else:
            shutil.copy2(a, b)

    copy_workload(src, dst, *SKIP, copy=copy)
