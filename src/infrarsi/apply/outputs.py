"""What Apply writes beside the run: the winner as one unified diff of the original workload, the
exact launch command, the audit trail of every trial, and the verification table."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infrarsi.identity import changed_knobs
from infrarsi.proposal import resolve
from infrarsi.records import ApplyResult
from infrarsi.trial import patching, prepare
from infrarsi.trial.launch import render
from infrarsi.units import format_ratio_bound
from infrarsi.workloads.folder import copy_workload
from infrarsi.workloads.manifest import Manifest

if TYPE_CHECKING:
    from infrarsi.contract import Contract

RDZV_PORT = 29500


def _git(args: list[str], cwd: Path) -> str:
    env = {
        **os.environ,
        "GIT_CEILING_DIRECTORIES": str(Path(cwd).resolve().parent),
        "GIT_AUTHOR_NAME": "infrarsi",
        "GIT_AUTHOR_EMAIL": "infrarsi@localhost",
        "GIT_COMMITTER_NAME": "infrarsi",
        "GIT_COMMITTER_EMAIL": "infrarsi@localhost",
    }
    result = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def fresh_copy(manifest: Manifest, dest: Path) -> Path:
    """A copy of the workload as a user has it, links resolved, caches left out."""
    copy_workload(manifest.root, dest)
    return dest


def winner_patch(manifest: Manifest, scale: str, knobs: dict[str, Any], patches: list[str]) -> str:
    """One unified diff (git format, paths relative to the workload's folder) with every patch
    of the winner applied in order; empty when the winner changes no code."""
    spec = prepare(manifest, scale, knobs, patches)  # refuses what a trial would refuse
    if not spec.patches:
        return ""
    with tempfile.TemporaryDirectory(prefix="infrarsi-patch-") as tmp:
        repo = fresh_copy(manifest, Path(tmp) / "workload")
        _git(["init", "-q"], repo)
        _git(["add", "-A"], repo)
        _git(["commit", "-q", "-m", "original"], repo)
        for source in spec.patches:
            patching.apply(source.path, repo)
        _git(["add", "-A"], repo)
        return _git(["diff", "--cached", "--binary", "--no-color"], repo)


def launch_script(
    manifest: Manifest, scale: str, knobs: dict[str, Any], patches: list[str], headline: str
) -> str:
    """A shell script that launches the winner from the (patched) workload's folder: the exact
    command of each node, with the workload's environment."""
    spec = prepare(manifest, scale, knobs, patches)
    lines = [
        "#!/usr/bin/env bash",
        f"# {headline}",
        "# Apply winner.patch to the workload first (git apply winner.patch), then run this",
        "# from the workload's folder (or set WORKLOAD_DIR).",
        "set -euo pipefail",
        f'cd "${{WORKLOAD_DIR:-{manifest.root}}}"',
    ]
    nodes = manifest.launch.nodes
    for node in range(nodes):
        command, env = render(spec, Path("."), "infrarsi-launch", node, RDZV_PORT)
        command[0] = manifest.launch.command[0]  # the user's own python / torchrun
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        line = (prefix + " " if prefix else "") + " ".join(shlex.quote(c) for c in command)
        lines.append(line + (" &" if nodes > 1 else ""))
    if nodes > 1:
        lines.append("wait")
    return "\n".join(lines) + "\n"


def write_winner(
    result: ApplyResult, manifest: Manifest, contract: Contract, run_dir: Path
) -> tuple[str, ...]:
    """The promoted winner's ``winner.patch`` (every patch of it in one diff, a proposed one
    read from the run folder) and ``launch.sh`` in ``run_dir``; what an earlier Apply of the run
    left there goes first. The names written (none when nothing was promoted)."""
    for stale in ("winner.patch", "launch.sh"):
        (run_dir / stale).unlink(missing_ok=True)
    winner = result.winner
    if winner is None:
        return ()
    patches = resolve(winner.patches, run_dir)  # a proposed patch lies in the run dir
    (run_dir / "winner.patch").write_text(
        winner_patch(manifest, contract.scale, winner.knobs, patches)
    )
    headline = (
        f"InfraRSI winner of run {result.run_id}: {winner.speedup:.3f}x "
        f"[{format_ratio_bound(winner.ci_low)}, {format_ratio_bound(winner.ci_high)}], "
        f"contract {contract.contract_hash[:12]}"
    )
    script = run_dir / "launch.sh"
    script.write_text(launch_script(manifest, contract.scale, winner.knobs, patches, headline))
    script.chmod(0o755)
    return ("winner.patch", "launch.sh")


def verification_table(result: ApplyResult) -> str:
    """The verification table as Markdown: each candidate's interval and checks."""
    rows = [
        "| candidate | knobs changed | patches | speed-up | interval | rounds | checks | "
        "promoted |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = result.baseline["knobs"]
    for c in result.candidates:
        changed = ", ".join(f"{k}={v}" for k, v in changed_knobs(c.knobs, base).items())
        checks = "all passed" if c.verified else "; ".join(c.reasons[:2]) or "failed"
        rows.append(
            f"| {c.label} | {changed or '-'} | {', '.join(c.patches) or '-'} | "
            f"{_x(c.speedup)} | [{format_ratio_bound(c.ci_low)}, "
            f"{format_ratio_bound(c.ci_high)}] | {len(c.ratios)} | "
            f"{checks} | {'yes' if c.promoted else 'no'} |"
        )
    return "\n".join(rows) + "\n"


def comparisons(result: ApplyResult) -> str:
    """What each candidate was compared with besides its rounds' baselines (the same-knob
    reference, the patch at fp32, the precision that ran, process ownership), what could not
    be checked, and what the reference runs cost."""
    lines = []
    for c in result.candidates:
        mine = [m for m in result.measurements if m.label == c.label]
        ran = sorted({r for m in mine for r in m.ran})
        missing = sorted({n for m in mine for n in m.not_checked})
        lines.append(f"- {c.label}: " + ("; ".join(ran) or "the baseline only"))
        lines += [f"  - not checked: {n}" for n in missing]
    refs = result.references
    if refs:
        cost_s = sum(r.cost_s for r in refs)
        judged = len({label for r in refs for label in r.for_labels})
        runs = ", ".join(f"{r.role} {r.trial_id}{' uncapped' if r.uncapped else ''}" for r in refs)
        lines.append(
            f"- reference runs: {len(refs)} for {judged} candidate(s), {cost_s:.1f} s ({runs})"
        )
    return "\n".join(lines) + "\n" if lines else ""


def _x(value: float | None) -> str:
    return f"{value:.3f}x" if value is not None else "-"
