"""Validating a proposed diff before it may cost a trial of the search, cheapest check first.

1. ``files``: every path it names is inside the workspace, editable and not locked (by the
   manifest or the contract), and it creates no symlink — judged on the diff's text, before
   anything is applied;
2. ``apply``: it applies cleanly to a scratch copy of the workload (``git apply --check``,
   tolerant of the hunk line counts an LLM gets wrong); what is kept is the diff git then
   writes of the change, so the stored patch applies exactly, anywhere;
3. ``compile``: every Python file it changed still compiles;
4. ``screen``: the added lines the static screen flags (the clock, the process, files, the
   environment, gradients switched off, another precision, monkeypatching) are noted with the
   outcome — a flag, never a verdict: a renamed or reformatted cheat reads otherwise, and what
   it does is what the smoke trial judges;
5. ``smoke``: a trial of the patched workload at the ``tiny`` scale passes every check
   ``verify`` makes against a smoke baseline run the same way — the final parameters, the
   held-out loss under the reference code, the loss curve, the harness's clock — both at a
   challenge seed drawn for the run, never the contract's own.

Only then may the patch join the search. The smoke trials run through the run's executor,
under a contract derived from the run's for the smoke scale (its tokens per step and steps).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from infrarsi.contract import Contract
from infrarsi.executors import Executor, TrialRequest
from infrarsi.objective import ranked_step_time_s
from infrarsi.paths import sha256_bytes
from infrarsi.proposal import PROPOSALS_DIR, TrialSink
from infrarsi.trial import TrialRecord, TrialStatus, prepare
from infrarsi.trial.patching import check_paths
from infrarsi.trial.screen import screen
from infrarsi.trial.spec import challenge_seed
from infrarsi.verify import verify
from infrarsi.workloads.folder import copy_workload

SMOKE_SCALE = "tiny"


def _ignore(label: str, record: TrialRecord) -> None:
    """A smoke trial nobody keeps (a check run outside a search)."""


@dataclass(frozen=True)
class Checked:
    """The outcome of validation: passed, or the stage that rejected it and why; the
    canonical diff once it applied; the smoke trial's speed-up over the smoke baseline."""

    ok: bool
    stage: str
    reason: str
    diff: str | None = None
    smoke_speedup: float | None = None
    flags: tuple[str, ...] = ()  # what the static screen noticed (shown, never decisive)

    @property
    def sha256(self) -> str | None:
        return sha256_bytes(self.diff.encode()) if self.diff else None


def smoke_contract(contract: Contract) -> Contract:
    """The run's contract at the smoke scale: the same tolerances, locks and editable files,
    with that scale's tokens per step and steps, and no capacity (the run's is for its own
    scale). The run's contract itself when it already runs at the smoke scale."""
    manifest = contract.manifest()
    scale = SMOKE_SCALE if SMOKE_SCALE in manifest.scales else contract.scale
    if scale == contract.scale:
        return contract
    spec = prepare(manifest, scale)
    invariants = contract.invariants.model_copy(
        update={
            "tokens_per_step": spec.tokens_per_step(),
            "steps": int(manifest.scale(scale).params["steps"]),
        }
    )
    return contract.model_copy(
        update={"scale": scale, "invariants": invariants, "mem_cap_bytes": None}
    ).sealed()


class Validator:
    """Checks diffs for one run: a scratch git copy of the workload, and the smoke baseline
    (run once, on the first diff that reaches the smoke stage)."""

    def __init__(self, contract: Contract, run_dir: Path, executor: Executor):
        self.contract, self.run_dir, self.executor = contract, Path(run_dir), executor
        self.manifest = contract.manifest()
        self.smoke = smoke_contract(contract)
        self.locked = sorted(set(self.manifest.files.locked) | set(contract.locked))
        self.folder = self.run_dir / PROPOSALS_DIR
        self.scratch = self.folder / "scratch"
        self._baseline: TrialRecord | None = None
        # the smoke baseline and every smoke trial run at one seed drawn for this run: a patch
        # that replays a stored result at the contract's seed shows no false speed-up here
        self.seed = challenge_seed()

    # -- the cheap checks ------------------------------------------------------------------
    def check(self, diff: str, smoke: bool = True, on_trial: TrialSink | None = None) -> Checked:
        """Every check in order; the first that fails rejects (``smoke=False``: stop before
        the smoke trial; ``on_trial``: where each smoke trial goes as it ends)."""
        reasons = check_paths(diff, self.manifest.root, self.contract.editable, self.locked)
        if reasons:
            return Checked(False, "files", "; ".join(reasons))
        canonical, problem = self._apply(diff)
        if problem:
            return Checked(False, "apply", problem)
        broken = self._compile()
        if broken:
            return Checked(False, "compile", broken, canonical)
        flags = tuple(str(f) for f in screen(canonical))
        if not smoke:
            return Checked(
                True, "screen", "passed the checks before the smoke trial", canonical, None, flags
            )
        return dataclasses.replace(self._smoke(canonical, on_trial or _ignore), flags=flags)

    def _git(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        env = {
            **os.environ,
            "GIT_CEILING_DIRECTORIES": str(self.scratch.resolve().parent),
            "GIT_AUTHOR_NAME": "infrarsi",
            "GIT_AUTHOR_EMAIL": "infrarsi@localhost",
            "GIT_COMMITTER_NAME": "infrarsi",
            "GIT_COMMITTER_EMAIL": "infrarsi@localhost",
        }
        return subprocess.run(
            ["git", *args], cwd=self.scratch, env=env, input=stdin, capture_output=True, text=True
        )

    def _fresh_scratch(self) -> None:
        """The scratch copy as the workload is: made once, reset before every diff."""
        if (self.scratch / ".git").is_dir():
            self._git("reset", "-q", "--hard")
            self._git("clean", "-fdxq")
            return
        shutil.rmtree(self.scratch, ignore_errors=True)
        copy_workload(self.manifest.root, self.scratch)
        for step in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "workload")):
            self._git(*step)

    def _apply(self, diff: str) -> tuple[str, str | None]:
        """(the canonical diff, None) when it applies; ("", git's reason) when it does not."""
        self._fresh_scratch()
        last = ""
        for strip in ("-p1", "-p0"):  # with a/ b/ prefixes, or without
            args = ("apply", "--recount", "--whitespace=nowarn", strip)
            result = self._git(*args, "--check", "-", stdin=diff)
            if result.returncode == 0:
                self._git(*args, "-", stdin=diff)
                self._git("add", "-A")
                canonical = self._git("diff", "--cached", "--no-color", "--no-ext-diff").stdout
                if not canonical.strip():
                    return "", "the diff changes nothing"
                return canonical, None
            last = last or result.stderr.strip()
        return "", f"git apply --check: {last.splitlines()[0] if last else 'failed'}"[:400]

    def _compile(self) -> str | None:
        """The first compile error of a changed Python file (None when all compile)."""
        changed = self._git("diff", "--cached", "--name-only").stdout.split()
        for name in changed:
            path = self.scratch / name
            if name.endswith(".py") and path.is_file():
                try:
                    compile(path.read_text(), name, "exec")
                except SyntaxError as exc:
                    return f"{name}:{exc.lineno}: {exc.msg}"
        return None

    # -- the smoke trial -------------------------------------------------------------------
    def _request(self, patches: list[str]) -> TrialRequest:
        return TrialRequest(
            workload=self.smoke.workload_path or self.smoke.workload,
            scale=self.smoke.scale,
            knobs={},
            patches=patches,
            contract_hash=self.smoke.contract_hash,
            workdir=f"{PROPOSALS_DIR}/smoke",
            seed=self.seed,
        )

    def _smoke(self, canonical: str, on_trial: TrialSink) -> Checked:
        if self._baseline is None or self._baseline.status is not TrialStatus.OK:
            self._baseline = self.executor.run(self._request([]))
            on_trial("smoke baseline", self._baseline)
            if self._baseline.status is not TrialStatus.OK:
                return Checked(
                    False,
                    "smoke",
                    "the smoke baseline itself ended "
                    f"{self._baseline.status.value}: {self._baseline.error}",
                    canonical,
                )
        sha = sha256_bytes(canonical.encode())[:12]
        pending = self.folder / f"pending-{sha}.diff"
        pending.write_text(canonical)
        try:
            record = self.executor.run(
                self._request([pending.relative_to(self.run_dir).as_posix()])
            )
        finally:
            pending.unlink(missing_ok=True)
        on_trial(f"smoke of diff {sha}", record)
        verdict = verify(self.smoke, self._baseline, record)
        if not verdict.valid:
            return Checked(False, "smoke", "; ".join(verdict.reasons)[:600], canonical)
        base = ranked_step_time_s(self._baseline, self.smoke.objective)
        mine = ranked_step_time_s(record, self.smoke.objective)
        return Checked(
            True, "smoke", "passed every check", canonical, base / mine if base and mine else None
        )
