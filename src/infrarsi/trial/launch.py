"""Launching a prepared trial in the sandbox: each node's command and environment (``render``:
the manifest's command with the trial's knobs, the seed, the channel's address, the hooks),
the launchers run to their end under the trial's memory cgroup with its files watched, the
outcome classified and the saved parameters evaluated: ``launch`` returns the trial's record."""

from __future__ import annotations

import functools
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from infrarsi.records.trial import Evaluation, TrialBase, TrialRecord, TrialStatus
from infrarsi.sandbox import HOOKS_DIR, memcg, ownership
from infrarsi.sandbox.memcg import RankMemory
from infrarsi.sandbox.process import (
    Launchers,
    ProcessResult,
    owner_alive,
    run_isolated,
)
from infrarsi.sandbox.remote import (
    RDZV_HOST,
    Elsewhere,
    LaunchOrder,
    RemoteLauncher,
    bind_interface,
    pack_workspace,
)
from infrarsi.trial import classify, evaluation
from infrarsi.trial.evaluation.server import isolation_for
from infrarsi.trial.filewatch import Moments, for_trial
from infrarsi.trial.metrics import MetricsError
from infrarsi.trial.spec import TrialSpec, seed_names
from infrarsi.trial.watch import MetricsChannel
from infrarsi.workloads.stdout import StdoutMetrics

PROFILE_FILE = "profile.json"


THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


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
        port: int = sock.getsockname()[1]
        return port


def resolve_program(program: str) -> str:
    """``python`` and ``torchrun`` mean the ones of the interpreter running InfraRSI."""
    if program in ("python", "python3"):
        return sys.executable
    sibling = Path(sys.executable).parent / program
    return str(sibling) if "/" not in program and sibling.exists() else program


def isolation() -> str:
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
    how = spec.manifest.evaluation
    saves = how is not None and how.framework in OBSERVER_SAVES
    if how is not None and how.framework in FRAMEWORK_SAVES:  # saved through the framework
        env[SAVE_PARAMS] = how.framework
    stop = int(spec.params()["steps"]) if spec.manifest.launch.stop_after_steps else None
    reports = spec.manifest.launch.observed
    if saves or stop or reports:  # the training watched through PyTorch itself
        env.update(observer_env(trial_dir, saves, stop, reports))
    return env


def observer_env(
    trial_dir: Path, weights: bool, stop_after: int | None, reports: bool = False
) -> dict[str, str]:
    """The settings of the rank's observer (``sandbox/_hooks/infrarsi_observe.py``): its
    records in the trial's folder, the optimizer's parameters saved where the harness reads
    them (``weights``), every rank ended after ``stop_after`` optimizer steps, its steps
    reported on the harness's metrics channel (``reports``)."""
    env = {OBSERVE: str(Path(trial_dir) / OBSERVED)}
    if weights:
        env[OBSERVE_WEIGHTS] = str(evaluation.weights_dir(trial_dir))
    if stop_after:
        env[STOP_AFTER] = str(stop_after)
    if reports:
        env[OBSERVE_REPORT] = "1"
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
    elif Path(command[0]).name == "accelerate":  # its one rank may come without LOCAL_RANK
        env["INFRARSI_MARK_LAUNCHER"] = "1"
    return env


# the framework hook's setting (sandbox/_hooks/infrarsi_params.py): the trial's, the dry run's
SAVE_PARAMS = "INFRARSI_SAVE_PARAMS"
FRAMEWORK_SAVES = ("trainer", "accelerate")
OBSERVER_SAVES = ("optimizer", "lightning")  # saved by the observer: whatever the framework
# the observer's settings (sandbox/_hooks/infrarsi_observe.py) and where its records go
OBSERVE, OBSERVE_WEIGHTS = "INFRARSI_OBSERVE", "INFRARSI_OBSERVE_WEIGHTS"
STOP_AFTER = "INFRARSI_STOP_AFTER_STEPS"
OBSERVE_REPORT = "INFRARSI_OBSERVE_REPORT"  # the observer's steps on the metrics channel
OBSERVED = "observed.rank{rank}.jsonl"

SEED_BY_PARAMETER = "parameter"


SEED_BY_BOOTSTRAP = "bootstrap"


def seed_setting(spec: TrialSpec) -> str:
    """How a challenge seed reaches the workload: its seed parameters, or (none named) the
    bootstrap's offset of every seed the script sets (``_hooks/infrarsi_seed.py``)."""
    if spec.seed is None:
        return ""
    return SEED_BY_PARAMETER if seed_names(spec.manifest, spec.scale) else SEED_BY_BOOTSTRAP


def launch(
    spec: TrialSpec,
    trial_dir: Path,
    workspace: Path,
    base: TrialBase,
    t0: float,
    late_warnings: list[str] | None = None,
) -> TrialRecord:
    """Launch the trial's nodes in the sandbox, watch its files, then classify and evaluate
    what it did: its record (``late_warnings`` after what the launch found)."""
    spread = spec.elsewhere if spec.manifest.launch.nodes > 1 else None
    rdzv = spread.host() if spread else None  # asked once: a cluster call on a Ray node
    channel = _channel(spec, trial_dir, rdzv)
    commands, envs = _rendered(spec, trial_dir, workspace, base.trial_id, channel, rdzv)
    remote = (
        _Spread(spread, workspace, trial_dir, base.trial_id, spec.cut_after_s, channel)
        if spread
        else None
    )
    launchers = Launchers(
        commands=commands,
        envs=envs,
        cwd=workspace,
        remote=remote.starters(len(commands)) if remote else {},
        read_stderr=isinstance(spec.manifest.launch.metrics, StdoutMetrics)
        and spec.manifest.launch.metrics.read_stderr,
    )
    result, moments, memory, launcher_memory = _sandboxed(
        spec, (trial_dir, workspace), base, launchers, (channel, spread is not None)
    )
    base = base.model_copy(update={"ownership": result.ownership})
    if remote is not None:
        memory = remote.join(trial_dir, memory, result)
        base = base.model_copy(update={"launcher_nodes": remote.nodes, "hosts": remote.hosts})
    outcome = classify.outcome(result, trial_dir, spec, memory)
    if outcome.status is TrialStatus.OK:
        outcome = _measure(spec, channel, result, outcome, memory)
        # a launcher on another host opens its own copies of the files, unseen here
        _annotate(outcome, launcher_memory, result, None if spread else moments)
    evaluated = _evaluated(spec, outcome, trial_dir, workspace)
    base = _warn(trial_dir, base, outcome, result)
    outcome.warnings.extend(late_warnings or [])
    if outcome.status is TrialStatus.SLOW:  # cut at the search's bound: its time is censored
        base = base.model_copy(update={"censored_time_per_step_s": spec.censored_step_time_s})
    return _record(base, outcome, evaluated, commands, result, t0)


def _sandboxed(
    spec: TrialSpec,
    where: tuple[Path, Path],
    base: TrialBase,
    launchers: Launchers,
    heard: tuple[MetricsChannel, bool],
) -> tuple[ProcessResult, Moments, dict[int, RankMemory] | None, RankMemory | None]:
    """The launchers run in the trial's memory cgroup, its files watched (``where``: its folder
    and workspace; ``heard``: the metrics' channel, whether it spans hosts, where a remote
    launcher gets its own host's cgroup): what the processes did, the files' moments, the
    ranks' and the launchers' memory (None without a cgroup)."""
    (trial_dir, workspace), (channel, spread) = where, heard
    watch = for_trial(spec, trial_dir, workspace, [p.paths for p in base.patches])
    with memcg.trial_cgroup(base.trial_id, owner_alive) as cgroup:
        for env in launchers.envs[:1] if spread else launchers.envs:
            env.update(cgroup.env() if cgroup else {})
        watch.start()
        try:
            result = run_isolated(
                launchers,
                trial_id=base.trial_id,
                timeout_s=spec.cut_after_s,
                logs=(trial_dir / "stdout.log", trial_dir / "stderr.log"),
                channel=channel,
                cgroup_procs=cgroup.launchers_procs if cgroup else None,
            )
        finally:
            moments = watch.stop()
        memory = cgroup.ranks() if cgroup else None
        return result, moments, memory, cgroup.launchers() if cgroup else None


def _evaluated(
    spec: TrialSpec, outcome: classify.Classified, trial_dir: Path, workspace: Path
) -> Evaluation | None:
    """The harness's evaluation of what an ``ok`` trial learned (None: not asked for, or the
    trial did not end ``ok``)."""
    if outcome.status is not TrialStatus.OK or not spec.evaluate:
        return None
    return evaluation.evaluate(spec, trial_dir, workspace)


def _record(
    base: TrialBase,
    outcome: classify.Classified,
    evaluated: Evaluation | None,
    commands: list[list[str]],
    result: ProcessResult,
    t0: float,
) -> TrialRecord:
    """The trial's record: what ``run_trial`` set (``base``) and what the launch found."""
    return base.record(
        status=outcome.status,
        error=outcome.error,
        metrics=outcome.metrics,
        evaluation=evaluated,
        warnings=outcome.warnings,
        commands=commands,
        returncode=result.returncode,
        cost_s=time.monotonic() - t0,
    )


def _annotate(
    outcome: classify.Classified,
    launcher_memory: RankMemory | None,
    result: ProcessResult,
    moments: Moments | None,
) -> None:
    """What the sandbox saw beside the ranks' reports: the launchers' peak memory (their
    cgroup's, else sampled from outside) and, where the files were watched, when the patched
    files were first opened, when the final parameters last changed, and how far apart the
    watch's reads around those moments were (what kept the watch from telling, a warning)."""
    metrics = outcome.metrics
    if metrics is None:
        return
    metrics.launcher_peak_mem_bytes = (
        launcher_memory.peak_bytes
        if launcher_memory
        else result.outside_other_peak_rss_bytes or None
    )
    if moments is not None:
        metrics.first_open_s = moments.first_open_s
        metrics.final_saved_s = moments.final_saved_s
        metrics.watch_lag_s = moments.lag_s
        if moments.problem:
            outcome.warnings.append(f"the harness's file watch: {moments.problem}")


def _rendered(
    spec: TrialSpec,
    trial_dir: Path,
    workspace: Path,
    trial_id: str,
    channel: MetricsChannel,
    rdzv: str | None,
) -> tuple[list[list[str]], list[dict[str, str]]]:
    """Each node's launch command and environment: the trial's own, the channel's address,
    and where the nodes are spread over hosts, the rendezvous host ``rdzv`` (the first binds
    its interface; each other launcher's host binds its own)."""
    host = rdzv or "127.0.0.1"
    port = free_port(host)
    rendered = [
        render(spec, workspace, trial_id, node, port, host)
        for node in range(spec.manifest.launch.nodes)
    ]
    commands = [command for command, _ in rendered]
    envs = [
        _trial_env(spec, trial_dir, command, workload_env) for command, workload_env in rendered
    ]
    for env in envs:
        env.update(channel.env())
        if rdzv:
            env[RDZV_HOST] = rdzv
    if rdzv:
        envs[0] = bind_interface(envs[0])
    return commands, envs


def _warn(
    trial_dir: Path, base: TrialBase, outcome: classify.Classified, result: ProcessResult
) -> TrialBase:
    """What the record must say beside its status: a rank the kernel refused a mount namespace
    (the base returned then says so in ``isolation``), processes killed after the launcher
    exited."""
    refused = sorted(trial_dir.glob("isolation.rank*.txt"))
    if refused:
        why = f"off: the kernel refused a mount namespace ({refused[0].read_text()})"
        base = base.model_copy(update={"isolation": why})
        outcome.warnings.append(f"the trial ran without isolation: {why}")
    if result.leftovers_killed and outcome.status is TrialStatus.OK:
        outcome.warnings.append(
            f"{result.leftovers_killed} process(es) of the trial were still "
            "running after the launcher exited; they were killed"
        )
    return base


def _channel(spec: TrialSpec, trial_dir: Path, tcp_host: str | None = None) -> MetricsChannel:
    how = spec.manifest.launch.metrics
    if not isinstance(how, StdoutMetrics):  # the probe's lines, or the observer's
        return MetricsChannel(trial_dir, tcp_host=tcp_host)
    return MetricsChannel.for_stdout(trial_dir, how.step_line, how.read_stderr)


class _Spread:
    """The launchers after the first of one trial, each on a host of ``elsewhere``: started
    with the channel's remote address, their outcomes joined to the trial's afterwards."""

    def __init__(
        self,
        elsewhere: Elsewhere,
        workspace: Path,
        trial_dir: Path,
        trial_id: str,
        timeout_s: float,
        channel: MetricsChannel,
    ) -> None:
        self.elsewhere, self.channel = elsewhere, channel
        self.packed = pack_workspace(workspace)
        self.trial_dir, self.trial_id, self.timeout_s = trial_dir, trial_id, timeout_s
        self.launched: list[RemoteLauncher] = []
        self.nodes, self.hosts = [elsewhere.node()], [elsewhere.host()]

    def starters(
        self, count: int
    ) -> dict[int, Callable[[list[str], dict[str, str]], RemoteLauncher]]:
        """Launchers 1.. ``count`` - 1, each started by a call on its host."""
        return {i: functools.partial(self._start, i) for i in range(1, count)}

    def _start(self, node_rank: int, command: list[str], env: dict[str, str]) -> RemoteLauncher:
        order = LaunchOrder(
            command=command,
            env={**env, **self.channel.remote_env()},
            workspace=self.packed,
            trial_dir=str(self.trial_dir),
            trial_id=self.trial_id,
            timeout_s=self.timeout_s,
        )
        launcher = self.elsewhere.start(node_rank, order)
        self.launched.append(launcher)
        return launcher

    def join(
        self, trial_dir: Path, memory: dict[int, RankMemory] | None, result: ProcessResult
    ) -> dict[int, RankMemory] | None:
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
    """A command that starts ranks (torchrun, ``accelerate launch``), as against one that is
    rank 0 itself."""
    program = Path(command[0]).name
    return (
        program == "torchrun"
        or "torch.distributed.run" in command
        or (program == "accelerate" and command[1:2] == ["launch"])
    )


def _measure(
    spec: TrialSpec,
    channel: MetricsChannel,
    result: ProcessResult,
    outcome: classify.Classified,
    memory: dict[int, RankMemory] | None,
) -> classify.Classified:
    """Turn the ranks' reports, as the harness's channel received them, into metrics, or into
    ``invalid``/``crash`` with the reason."""
    how = spec.manifest.launch.metrics
    try:
        reports = channel.reports(how if isinstance(how, StdoutMetrics) else None)
        measured = classify.measured(spec, reports, result, memory, channel.timing())
    except MetricsError as exc:
        return classify.Classified(
            TrialStatus.CRASH, f"metrics: {exc}", warnings=list(outcome.warnings)
        )
    measured.warnings[:0] = outcome.warnings
    if not isinstance(how, StdoutMetrics) and reports and not reports[0].device.startswith("cuda"):
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
