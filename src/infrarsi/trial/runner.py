"""One trial, start to end: the only place a trial's lifecycle lives and every outcome is sorted.

``prepare`` checks the knob assignment and the patches before anything runs; ``run_trial`` makes a
fresh workspace copy, applies the patches, launches the workload in isolation with a timeout and a
per-rank memory capacity (each rank in its own memory cgroup, see ``memcg``), and classifies the
outcome into exactly one status of the record.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from infrarsi.errors import InfraRSIError
from infrarsi.host import host_fingerprint
from infrarsi.sandbox import HOOKS_DIR, memcg, ownership
from infrarsi.sandbox.process import Launchers, owner_alive, run_isolated, sweep_orphans
from infrarsi.sandbox.remote import RDZV_HOST, bind_interface, pack_workspace
from infrarsi.trial import classify, evaluation, patching
from infrarsi.trial.evaluation.server import isolation_for
from infrarsi.trial.filewatch import for_trial
from infrarsi.trial.metrics import MetricsError
from infrarsi.trial.record import PatchRef, TrialRecord, TrialStatus
from infrarsi.trial.screen import screen
from infrarsi.trial.spec import PatchSource, TrialSpec, seed_names
from infrarsi.trial.watch import MetricsChannel
from infrarsi.workloads import knobs
from infrarsi.workloads.manifest import Manifest

PROFILE_FILE = "profile.json"
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def prepare(
    manifest: Manifest,
    scale: str,
    overrides: dict | None = None,
    patches: list[str] | tuple[str, ...] = (),
    **options,
) -> TrialSpec:
    """Validate knobs (AssignmentError) and patches (PatchRefused) without running anything.

    Each patch is a catalog id of the workload or the path of a unified diff file.
    """
    manifest.scale(scale)
    _check_options(manifest=manifest, **options)
    assignment = knobs.resolve(manifest, scale, overrides or {})
    sources = tuple(patch_source(manifest, p) for p in patches)
    for source in sources:
        refuse_patch(manifest, source.path)
    _refuse_conflicts(manifest, sources)
    return TrialSpec(manifest, scale, assignment, sources, **options)


class CapacityUnavailable(ValueError):
    """A per-rank memory capacity was asked for where it cannot be enforced."""


def _check_options(
    mem_cap_bytes: int | None = None,
    timeout_s: float | None = None,
    steps: int | None = None,
    manifest: Manifest | None = None,
    **_,
) -> None:
    """ValueError naming the option when a capacity, timeout or step count cannot be
    honoured."""
    if timeout_s is not None and not timeout_s > 0:
        raise InfraRSIError(f"timeout {timeout_s:g} s: give a positive number of seconds")
    if steps is not None and (steps < 1 or int(steps) != steps):
        raise InfraRSIError(f"steps {steps}: give a positive whole number of optimizer steps")
    if steps is not None and manifest is not None and not manifest.launch.passes_steps():
        raise InfraRSIError(
            f"{manifest.name} cannot run {steps} steps: its launch command has no {{steps}} "
            "field; pass the step count to the script as {steps} in the manifest"
        )
    if mem_cap_bytes is None:
        return
    if mem_cap_bytes <= 0:
        raise InfraRSIError(f"memory capacity {mem_cap_bytes} bytes: give a positive size")
    try:
        memcg.detect()
    except memcg.MemcgUnavailable as exc:
        raise CapacityUnavailable(
            f"a per-rank memory capacity needs a writable memory cgroup, "
            f"and {exc}; run without --mem-cap to measure the peak only"
        ) from None


def patch_source(manifest: Manifest, patch: str) -> PatchSource:
    """Resolve a catalog id or a diff file path; PatchRefused naming the catalog otherwise."""
    if any(p.id == patch for p in manifest.patches):
        return PatchSource(patch, manifest.patch_path(patch), catalog=True)
    path = Path(patch)
    if path.suffix in (".diff", ".patch") and path.is_file():
        # a user's diff keeps its file name (with the suffix): never mistaken for a catalog id
        return PatchSource(path.name, path.resolve(), catalog=False)
    raise patching.PatchRefused(
        f"unknown patch {patch!r}: give a catalog id of {manifest.name} "
        f"({', '.join(p.id for p in manifest.patches)}) or a .diff file"
    )


def refuse_patch(manifest: Manifest, diff_file: Path) -> None:
    """PatchRefused naming every reason the diff may not be applied to this workload."""
    reasons = patching.check_paths(
        Path(diff_file).read_text(), manifest.root, manifest.files.editable, manifest.files.locked
    )
    if reasons:
        raise patching.PatchRefused(f"patch {Path(diff_file).name} refused: {'; '.join(reasons)}")


def _refuse_conflicts(manifest: Manifest, sources: tuple[PatchSource, ...]) -> None:
    ids = [s.id for s in sources]
    if len(set(ids)) != len(ids):
        raise patching.PatchRefused(f"a patch is listed twice: {ids}")
    for source in sources:
        if source.catalog:
            clash = set(manifest.patch(source.id).conflicts) & set(ids)
            if clash:
                raise patching.PatchRefused(f"patch {source.id} conflicts with {sorted(clash)}")


def new_trial_id(manifest: Manifest) -> str:
    """A unique, sortable trial id."""
    return f"{manifest.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def run_trial(spec: TrialSpec, workdir: Path) -> TrialRecord:
    """Run one prepared trial in a fresh workspace under ``workdir``; always returns a record."""
    t0, started = time.monotonic(), time.time()
    swept = sweep_orphans()
    trial_id = new_trial_id(spec.manifest)
    trial_dir = Path(workdir).resolve() / trial_id
    workspace = trial_dir / "workspace"
    base: dict[str, Any] = dict(
        trial_id=trial_id,
        workload=spec.manifest.name,
        scale=spec.scale,
        knobs=spec.knobs,
        contract_hash=spec.contract_hash,
        mem_cap_bytes=spec.mem_cap_bytes,
        timeout_s=spec.effective_timeout_s,
        slow_after_s=spec.slow_after_s,
        started_unix_s=started,
        trial_dir=str(trial_dir),
        fingerprint=host_fingerprint(),
        seed=spec.seed,
        steps=spec.steps,
        seed_set_by=seed_setting(spec),
        isolation=_isolation(),
    )
    shutil.copytree(
        spec.manifest.root, workspace, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    refs = [
        PatchRef(
            id=p.id,
            sha256=patching.sha256_file(p.path),
            catalog=p.catalog,
            paths=list(patching.diff_paths(p.path.read_text()).paths),
            flags=[str(f) for f in screen(p.path.read_text())],
        )
        for p in spec.patches
    ]
    locked, problem = _apply_and_hash(spec, workspace)
    base.update(patches=refs, locked_files=locked)
    if problem is not None:
        status, error = problem
        record = TrialRecord(**base, status=status, error=error, cost_s=time.monotonic() - t0)
    else:
        try:
            record = _launch(spec, trial_dir, workspace, base, t0)
            if swept:
                record.warnings.append(
                    f"{swept} process(es) of earlier trials whose tool was "
                    "killed were still running; they were killed first"
                )
        except BaseException as exc:  # the tool is stopped: the trial's processes are gone
            TrialRecord(
                **base,
                status=TrialStatus.CRASH,
                cost_s=time.monotonic() - t0,
                error=f"interrupted: the tool was stopped ({type(exc).__name__}) "
                "and ended the trial",
            ).save(trial_dir / "record.json")
            raise
    record.save(trial_dir / "record.json")
    return record


def _apply_and_hash(spec: TrialSpec, workspace: Path):
    """Apply the patches, hash the locked files; (hashes, None) or (hashes, (status, error))."""
    try:
        for source in spec.patches:
            patching.apply(source.path, workspace)
    except patching.PatchFailed as exc:
        return locked_hashes(spec.manifest, workspace), (TrialStatus.CRASH, str(exc))
    locked = locked_hashes(spec.manifest, workspace)
    original = locked_hashes(spec.manifest, spec.manifest.root)
    changed = sorted(p for p in original if locked.get(p) != original[p])
    if changed:
        return locked, (TrialStatus.INVALID, f"locked files changed: {changed}")
    return locked, None


def locked_hashes(manifest: Manifest, root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` matching the manifest's locked globs."""
    out = {}
    for path in sorted(Path(root).rglob("*")):
        rel = path.relative_to(root).as_posix()
        if (
            path.is_file()
            and "__pycache__" not in rel
            and patching.matches(rel, manifest.files.locked)
        ):
            out[rel] = patching.sha256_file(path)
    return out


def render(
    spec: TrialSpec,
    workspace: Path,
    trial_id: str = "trial",
    node_rank: int = 0,
    rdzv_port: int = 0,
    rdzv_host: str = "127.0.0.1",
) -> tuple[list[str], dict[str, str]]:
    """One launcher's command and the workload's own environment, templates filled in."""
    fields = {k: int(v) if isinstance(v, bool) else v for k, v in spec.params().items()}
    fields.update(
        workspace=str(workspace),
        node_rank=node_rank,
        nodes=spec.manifest.launch.nodes,
        rdzv_host=rdzv_host,
        rdzv_port=rdzv_port,
        trial_id=trial_id,
    )
    flags = {
        f"{{{k.name}}}": k.flag if spec.knobs.get(k.name) else None
        for k in spec.manifest.knobs
        if k.flag is not None
    }
    command: list[str] = []
    for part in spec.manifest.launch.command:
        if part not in flags:
            command.append(part.format(**fields))
        elif (flag := flags[part]) is not None:  # a flag knob that is on: its flag; off: nothing
            command.append(flag)
    command[0] = resolve_program(command[0])
    env = {k: v.format(**fields) for k, v in spec.manifest.launch.env.items()}
    # a thread count of 0 leaves the variable unset: the launcher's default (torchrun's 1 per
    # rank with several ranks, else every core), as a job started without it has
    return command, {k: v for k, v in env.items() if not (k in THREAD_ENV and v == "0")}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free now (the rendezvous of multi-node launches)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def resolve_program(program: str) -> str:
    """``python`` and ``torchrun`` mean the ones of the interpreter running InfraRSI."""
    if program in ("python", "python3"):
        return sys.executable
    sibling = Path(sys.executable).parent / program
    return str(sibling) if "/" not in program and sibling.exists() else program


def _isolation() -> str:
    """What the record says of the ranks' isolation before they run (a rank whose kernel
    refuses it says so after)."""
    if not ownership.available():
        return f"off: {ownership.why_no_namespace()}"
    return "namespace" if ownership.mode() == ownership.ROOT else "namespace (in a user namespace)"


def _trial_env(
    spec: TrialSpec, trial_dir: Path, command: list[str], workload_env: dict[str, str]
) -> dict[str, str]:
    env = isolated_env(trial_dir, command, {**workload_env, **spec.extra_env}, spec.mem_cap_bytes)
    if "INFRARSI_PROFILE_STEP" in env:  # a profiled run writes into its own folder
        env["INFRARSI_PROFILE_FILE"] = str(trial_dir / PROFILE_FILE)
    if seed_setting(spec) == SEED_BY_BOOTSTRAP:  # no seed parameter: offset its own seeds
        env["INFRARSI_SEED_OFFSET"] = str(spec.seed)
    return env


def isolated_env(
    trial_dir: Path,
    command: list[str],
    workload_env: dict[str, str],
    mem_cap_bytes: int | None = None,
) -> dict[str, str]:
    """The environment ``command`` runs in as a trial (a draft's dry run too): the host's
    without its thread settings and the harness's own variables, the workload's added;
    unbuffered output (lines reach the harness's clock as printed), the bootstrap hooks, a
    private empty home, cache and temporary folder in ``trial_dir``, the isolation hooks'
    settings and each rank's memory cap (a plain launch's one process being rank 0)."""
    env = {
        k: v for k, v in os.environ.items() if k not in THREAD_ENV and not k.startswith("INFRARSI_")
    }
    env.update(workload_env)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOKS_DIR), env.get("PYTHONPATH")]))
    env["INFRARSI_ERROR_FILE"] = str(trial_dir / "error.rank{rank}.jsonl")
    env["INFRARSI_WEIGHTS_DIR"] = str(evaluation.weights_dir(trial_dir))
    env["INFRARSI_TRIAL_DIR"] = str(trial_dir)
    for name, var in (("home", "HOME"), ("cache", "XDG_CACHE_HOME")):  # private, empty
        (trial_dir / name).mkdir(exist_ok=True)
        env[var] = str(trial_dir / name)
    isolation = isolation_for(trial_dir)
    if isolation is not None:
        (trial_dir / "tmp").mkdir(exist_ok=True)
        env["TMPDIR"] = str(trial_dir / "tmp")  # the only writable place besides its folder
        env["INFRARSI_ISOLATE"] = "1"
        env["INFRARSI_HIDE"] = os.pathsep.join(isolation["hidden"])
    if mem_cap_bytes is not None:
        env["INFRARSI_RANK_MEM_CAP_BYTES"] = str(mem_cap_bytes)
    if not is_launcher(command):
        env["INFRARSI_CAP_SELF"] = "1"  # a plain launch: the one process is rank 0
    return env


SEED_BY_PARAMETER = "parameter"
SEED_BY_BOOTSTRAP = "bootstrap"


def seed_setting(spec: TrialSpec) -> str:
    """How a challenge seed reaches the workload: its seed parameters, or (none named) the
    bootstrap's offset of every seed the script sets (``_hooks/infrarsi_seed.py``)."""
    if spec.seed is None:
        return ""
    return SEED_BY_PARAMETER if seed_names(spec.manifest, spec.scale) else SEED_BY_BOOTSTRAP


def _launch(
    spec: TrialSpec, trial_dir: Path, workspace: Path, base: dict, t0: float
) -> TrialRecord:
    spread = spec.elsewhere if spec.manifest.launch.nodes > 1 else None
    host = spread.host() if spread else "127.0.0.1"
    port = free_port(host)
    channel = _channel(spec, trial_dir, host if spread else None)
    rendered = [
        render(spec, workspace, base["trial_id"], node, port, host)
        for node in range(spec.manifest.launch.nodes)
    ]
    commands = [command for command, _ in rendered]
    envs = [
        _trial_env(spec, trial_dir, command, workload_env) for command, workload_env in rendered
    ]
    for env in envs:
        env.update(channel.env())
        if spread:
            env[RDZV_HOST] = host
    if spread:
        envs[0] = bind_interface(envs[0])  # each other launcher's host binds its own
    remote = (
        _Spread(spread, workspace, trial_dir, base["trial_id"], spec.cut_after_s, channel)
        if spread
        else None
    )
    watch = for_trial(spec, trial_dir, workspace, [p.paths for p in base["patches"]])
    with memcg.trial_cgroup(base["trial_id"], owner_alive) as cgroup:
        for env in envs[:1] if spread else envs:  # a remote launcher's host gives its own
            env.update(cgroup.env() if cgroup else {})
        how = spec.manifest.launch.metrics
        launch = Launchers(
            commands=commands,
            envs=envs,
            cwd=workspace,
            remote=remote.starters(len(commands)) if remote else {},
            read_stderr=how != "probe" and how.read_stderr,
        )
        watch.start()
        try:
            result = run_isolated(
                launch,
                trial_id=base["trial_id"],
                timeout_s=spec.cut_after_s,
                logs=(trial_dir / "stdout.log", trial_dir / "stderr.log"),
                channel=channel,
                cgroup_procs=cgroup.launchers_procs if cgroup else None,
            )
        finally:
            moments = watch.stop()
        memory = cgroup.ranks() if cgroup else None
        launchers = cgroup.launchers() if cgroup else None
    base["ownership"] = result.ownership
    if remote is not None:
        memory = remote.join(trial_dir, memory, result)
        base["launcher_nodes"], base["hosts"] = remote.nodes, remote.hosts
    outcome = classify.outcome(result, trial_dir, spec, memory)
    if outcome.status is TrialStatus.OK:
        outcome = _measure(spec, channel, result, outcome, memory)
        if outcome.metrics is not None:
            outcome.metrics.launcher_peak_mem_bytes = (
                launchers.peak_bytes if launchers else result.outside_other_peak_rss_bytes or None
            )
            if not spread:  # a launcher on another host opens its own copies, unseen here
                outcome.metrics.first_open_s = moments.first_open_s
                outcome.metrics.final_saved_s = moments.final_saved_s
    evaluated = (
        evaluation.evaluate(spec, trial_dir, workspace)
        if outcome.status is TrialStatus.OK and spec.evaluate
        else None
    )
    refused = sorted(trial_dir.glob("isolation.rank*.txt"))
    if refused:
        base["isolation"] = f"off: the kernel refused a mount namespace ({refused[0].read_text()})"
        outcome.warnings.append(f"the trial ran without isolation: {base['isolation']}")
    if result.leftovers_killed and outcome.status is TrialStatus.OK:
        outcome.warnings.append(
            f"{result.leftovers_killed} process(es) of the trial were still "
            "running after the launcher exited; they were killed"
        )
    return TrialRecord(
        **base,
        status=outcome.status,
        error=outcome.error,
        metrics=outcome.metrics,
        evaluation=evaluated,
        warnings=outcome.warnings,
        commands=commands,
        returncode=result.returncode,
        cost_s=time.monotonic() - t0,
    )


def _channel(spec: TrialSpec, trial_dir: Path, tcp_host: str | None = None) -> MetricsChannel:
    how = spec.manifest.launch.metrics
    if how == "probe":
        return MetricsChannel(trial_dir, tcp_host=tcp_host)
    return MetricsChannel.for_stdout(trial_dir, how.step_line, how.read_stderr)


class _Spread:
    """The launchers after the first of one trial, each on a host of ``elsewhere``: started
    with the channel's remote address, their outcomes joined to the trial's afterwards."""

    def __init__(
        self,
        elsewhere,
        workspace: Path,
        trial_dir: Path,
        trial_id: str,
        timeout_s: float,
        channel: MetricsChannel,
    ) -> None:
        self.elsewhere, self.channel = elsewhere, channel
        self.packed = pack_workspace(workspace)
        self.trial_dir, self.trial_id, self.timeout_s = trial_dir, trial_id, timeout_s
        self.launched: list = []
        self.nodes, self.hosts = [elsewhere.node()], [elsewhere.host()]

    def starters(self, count: int) -> dict:
        return {i: (lambda cmd, env, i=i: self._start(i, cmd, env)) for i in range(1, count)}

    def _start(self, node_rank: int, command: list[str], env: dict[str, str]):
        env = {**env, **self.channel.remote_env()}
        launcher = self.elsewhere.start(
            node_rank, command, env, self.packed, str(self.trial_dir), self.trial_id, self.timeout_s
        )
        self.launched.append(launcher)
        return launcher

    def join(self, trial_dir: Path, memory: dict | None, result) -> dict | None:
        """Each remote launcher's files and logs into the trial's folder, its ranks' memory
        and outside peaks into the trial's; the memory by rank."""
        for launcher in self.launched:
            outcome = launcher.outcome()
            outcome.unpack(trial_dir)
            self.nodes.append(outcome.node)
            self.hosts.append(outcome.host)
            if memory is not None:
                memory.update(outcome.rank_memory())
            result.outside_peak_rss_bytes.update(outcome.peak_rss_bytes)
        return dict(sorted(memory.items())) if memory is not None else None


def is_launcher(command: list[str]) -> bool:
    """A command that starts ranks (torchrun), as against one that is rank 0 itself."""
    return Path(command[0]).name == "torchrun" or "torch.distributed.run" in command


def _measure(spec: TrialSpec, channel: MetricsChannel, result, outcome, memory):
    """Turn the ranks' reports, as the harness's channel received them, into metrics, or into
    ``invalid``/``crash`` with the reason."""
    how = spec.manifest.launch.metrics
    try:
        reports = channel.reports(None if how == "probe" else how)
        measured = classify.measured(spec, reports, result, memory, channel.timing())
    except MetricsError as exc:
        return classify.Classified(
            TrialStatus.CRASH, f"metrics: {exc}", warnings=list(outcome.warnings)
        )
    measured.warnings[:0] = outcome.warnings
    if how == "probe" and reports and not reports[0].device.startswith("cuda"):
        measured.warnings += host_cuda_unused()
    return measured


@functools.cache
def _host_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def host_cuda_unused() -> list[str]:
    """The warning for a trial whose ranks ran on the CPU of a host with CUDA GPUs (its
    workload chose so, or CUDA could not start inside the trial: its stderr says which)."""
    gpus = _host_gpus()
    if not gpus:
        return []
    return [
        f"this host has {gpus} CUDA GPU(s) but the trial's ranks ran on the CPU: the workload "
        "chose it, or CUDA could not start inside the trial (see its stderr.log)"
    ]
