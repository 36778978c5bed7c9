"""``apply --to-branch``: the promoted winner as a commit on a new branch of the user's workload
repository, its message carrying the evidence (speed-up, interval, checks, launch command)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from infrarsi.errors import InfraRSIError
from infrarsi.records import ApplyResult
from infrarsi.units import format_ratio_bound


class BranchError(InfraRSIError):
    """The winner cannot be committed: no git repository, a taken branch name, local edits."""


def _git(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise BranchError(f"git {' '.join(args)}: {result.stderr.strip()}")
    return result


def commit_message(result: ApplyResult, launch: str) -> str:
    """The commit message: what changed, the measured evidence, how to launch it."""
    w = result.winner
    if w is None or w.speedup is None or w.ci_low is None or w.ci_high is None:
        raise BranchError("nothing was promoted: there is no winner to commit")
    command = [
        line for line in launch.splitlines() if line and not line.startswith(("#", "set ", "cd "))
    ]
    return "\n".join(
        [
            f"InfraRSI: {w.speedup:.3f}x faster {result.workload} ({result.scale})",
            "",
            f"Speed-up {w.speedup:.3f}x, {result.confidence:.0%} interval "
            f"[{format_ratio_bound(w.ci_low)}, {format_ratio_bound(w.ci_high)}] over "
            f"{len(w.ratios)} interleaved rounds against the baseline ({result.compared}).",
            "Every verify check passed in every round (workload invariants, locked files, loss, "
            "learned weights and held-out loss, memory capacity, timing).",
            f"Patches: {', '.join(w.patches) or 'none'}.",
            f"Run {result.run_id}, contract {result.contract_hash[:12]}.",
            "",
            "Launch:",
            *[f"    {line}" for line in command],
        ]
    )


def to_branch(result: ApplyResult, workload_root: Path, name: str) -> str:
    """Commit ``winner.patch`` on a new branch ``name`` of the repository holding the workload;
    returns the commit id. The repository's current branch is left checked out as it was."""
    if result.winner is None:
        raise BranchError("nothing was promoted: there is no winner to commit")
    root = Path(workload_root).resolve()
    top = _git(["rev-parse", "--show-toplevel"], root, check=False)
    if top.returncode != 0:
        raise BranchError(
            f"the workload at {root} is not in a git repository: copy it into "
            "one (git init) or apply winner.patch by hand"
        )
    top_dir = Path(top.stdout.strip())
    if (
        _git(
            ["rev-parse", "--verify", "--quiet", f"refs/heads/{name}"], top_dir, check=False
        ).returncode
        == 0
    ):
        raise BranchError(f"branch {name!r} already exists in {top_dir}: choose another name")
    if _git(["status", "--porcelain", "--", str(root)], top_dir).stdout.strip():
        raise BranchError(
            f"the workload folder {root} has uncommitted changes: commit or stash them first"
        )
    run_dir = Path(result.run_dir)
    patch = (run_dir / "winner.patch").resolve()
    rel = root.relative_to(top_dir).as_posix()
    worktree = run_dir / f"branch-{name.replace('/', '-')}"
    _git(["worktree", "add", "-q", "-b", name, str(worktree)], top_dir)
    try:
        if patch.stat().st_size:
            where = ["--directory", rel] if rel != "." else []
            _git(["apply", *where, str(patch)], worktree)
            _git(["add", "-A", "--", rel], worktree)
        message = commit_message(result, (run_dir / "launch.sh").read_text())
        known = _git(["config", "user.email"], worktree, check=False).stdout.strip()
        ident = [] if known else ["-c", "user.name=InfraRSI", "-c", "user.email=infrarsi@localhost"]
        _git([*ident, "commit", "-q", "--allow-empty", "-m", message], worktree)
        return _git(["rev-parse", "HEAD"], worktree).stdout.strip()
    finally:
        _git(["worktree", "remove", "--force", str(worktree)], top_dir, check=False)
