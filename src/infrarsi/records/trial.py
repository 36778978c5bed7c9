"""The trial record: everything one measured run of a workload produced, complete and honest.

Every trial ends in exactly one status. An ``oom`` is a right-censored observation of peak memory:
it proves the configuration needs more than ``mem_cap_bytes`` per rank, which is kept as the
censoring bound. Records are frozen once written and are stored as JSON beside the trial's logs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from infrarsi.enums import ValueEnum
from infrarsi.identity import Configuration

RECORD_SCHEMA_VERSION = 2


class TrialStatus(ValueEnum):
    """Where a trial is: in flight (``running``, or ``interrupted`` when the tool died while it
    ran: a stored trial only) or how it ended. A ``TrialRecord`` always holds a finished one."""

    RUNNING = "running"  # launched, not ended yet
    INTERRUPTED = "interrupted"  # the run was stopped while it ran; it is proposed again
    OK = "ok"  # ran to the end; metrics are valid
    OOM = "oom"  # an allocation failed under the memory capacity (right-censored)
    TIMEOUT = "timeout"  # did not finish within the time limit; killed
    CRASH = "crash"  # failed for another reason; ``error`` holds the tail of the failure
    INVALID = "invalid"  # finished, but computed something else than the workload (or refused)
    SLOW = "slow"  # cut short at the search's bound: slower than worth finishing
    # (its time per step right-censored, as an OOM's peak is)

    def is_finished(self) -> bool:
        """Whether the trial has ended (every status but ``running`` and ``interrupted``)."""
        return self not in (TrialStatus.RUNNING, TrialStatus.INTERRUPTED)

    def is_ok(self) -> bool:
        """Whether it ran to the end with valid metrics."""
        return self is TrialStatus.OK

    def is_failure(self) -> bool:
        """Whether it ended without a measured time: oom, timeout, crash or invalid (a ``slow``
        trial carries a censored time, so it is not one)."""
        return self.is_finished() and self not in (TrialStatus.OK, TrialStatus.SLOW)

    @classmethod
    def finished(cls) -> tuple[TrialStatus, ...]:
        """Every status a trial can end in."""
        return tuple(s for s in cls if s.is_finished())


class PatchRef(BaseModel):
    """A patch that was applied: its id, the sha256 of its diff bytes, the paths it touches."""

    model_config = ConfigDict(frozen=True)
    id: str
    sha256: str
    catalog: bool = True
    paths: list[str] = []
    flags: list[str] = Field(
        [], description="lines the static screen flags, with why (shown, not decisive)"
    )


class TrialMetrics(BaseModel):
    """What an ``ok`` trial measured; times in seconds, memory in bytes, one entry per rank/step.

    ``step_time_s`` is the median of the steady-state steps (the first ``warmup_steps`` steps are
    excluded); a step's time is that of its slowest rank. ``e2e_time_s`` is measured by the
    harness from outside, launch to exit: start-up, compile and every step. ``compile_time_s`` is
    the warm-up steps' excess over steady state when the assignment turns ``compile`` on, else 0.
    ``peak_mem_bytes`` is each rank's peak as the harness measured it (``peak_mem_source``):
    on the CPU the kernel's high-water mark of the rank's memory cgroup — the very quantity the
    capacity limits, shared memory included — and on CUDA the device's max reserved memory;
    ``None`` for a rank whose peak could not be measured. ``reported_peak_mem_bytes`` is what
    the ranks' own probe said (the rank's RSS on CPU), kept for comparison only.
    """

    step_time_s: float
    step_time_cv: float = Field(description="coefficient of variation of steady-state steps")
    e2e_time_s: float
    train_time_s: float
    startup_time_s: float
    warmup_overhead_s: float
    compile_time_s: float
    tokens_per_step: int
    tokens_per_s: float
    peak_mem_bytes: list[int | None]
    peak_mem_source: str = Field("memcg", description="memcg, cuda_max_reserved or rss_sampled")
    reported_peak_mem_bytes: list[int] = []
    launcher_peak_mem_bytes: int | None = Field(
        None,
        description="peak memory of every process "
        "of the trial that is not a rank (the "
        "launchers: their cgroup's high-water mark, or "
        "their summed RSS sampled from outside)",
    )
    outside_peak_rss_bytes: list[int | None] = Field(
        [], description="per-rank peak RSS sampled by the harness every 0.2 s"
    )
    outside_train_span_s: float | None = Field(
        None, description="seconds the harness saw a rank train, by its own clock"
    )
    outside_span_steps: int | None = Field(
        None, description="how many of the last reported steps that span covers"
    )
    harness_step_times_s: list[float | None] = Field(
        [],
        description="each step's time by the "
        "harness's clock (its metrics line's "
        "arrival, slowest rank), to 10 ms",
    )
    harness_step_time_s: float | None = Field(
        None, description="median of the steady steps' harness times: what candidates are ranked on"
    )
    harness_tail_s: float | None = Field(
        None, description="seconds from the last step line to the exit, by the harness's clock"
    )
    first_open_s: dict[str, float] = Field(
        {},
        description="seconds from launch to the first open of each file a patch may touch "
        "(the kernel's inotify): no patch's code runs before it",
    )
    final_saved_s: float | None = Field(
        None,
        description="seconds from launch to the last change of the bytes under the final "
        "parameters' name (the kernel's inotify on their folder and inode, and their change "
        "time at the end): the workload's work ends there",
    )
    watch_lag_s: float | None = Field(
        None,
        description="the most the harness's reader can have mistimed those two moments (the "
        "span of the reads that delivered them): a first open is timed at its earliest, the "
        "end at its latest",
    )
    loss: list[float]
    step_times_s: list[float]
    phases_s: dict[str, float] = Field(
        {}, description="mean seconds per steady step, per phase, of the slowest rank at each step"
    )
    unattributed_s: float = Field(
        0.0, description="mean steady step time minus the phases: time outside every phase"
    )
    steps: int
    warmup_steps: int
    ranks: int

    @property
    def max_peak_mem_bytes(self) -> int | None:
        """The largest measured per-rank peak (None when no rank's peak is known)."""
        return max((b for b in self.peak_mem_bytes if b is not None), default=None)


class Evaluation(BaseModel):
    """What the harness learned of the trial's parameters, with its own code (see
    ``trial.evaluation``): where they are in the reference layout, and their held-out loss
    under the unpatched model. ``error`` says why a part could not be done."""

    final_weights: str | None = None
    initial_weights: str | None = None
    final_sha256: str | None = None
    eval_loss: float | None = None
    initial_eval_loss: float | None = None
    layout_problems: list[str] = []
    inert_params: list[str] = Field(
        [],
        description="parameters whose gradient the reference "
        "model gives as zero, at the initial and final parameters",
    )
    aliases: dict[str, str] = Field(
        {},
        description="another name of a parameter of the reference model (a tied one) -> its "
        "own name there, as the evaluation reported: checks compare parameters, not names",
    )
    remapped: bool = False
    remap_s: float = Field(
        0.0,
        description="seconds the patch's own mapping to the reference "
        "layout ran: its code's work, charged to an e2e_time objective",
    )
    cost_s: float = Field(0.0, description="seconds the harness's checks took after training")
    error: str | None = None


class TrialRecord(BaseModel):
    """One trial, whatever its outcome: configuration, provenance, outcome, metrics and cost.
    Frozen: everything it says is known when it is built (a changed copy is a new record)."""

    model_config = ConfigDict(frozen=True)

    @property
    def configuration(self) -> Configuration:
        """The configuration it ran: its knobs and the ids of its patches."""
        return Configuration.of(self.knobs, [p.id for p in self.patches])

    schema_version: int = RECORD_SCHEMA_VERSION
    trial_id: str
    workload: str
    scale: str
    status: TrialStatus
    knobs: dict[str, int | float | bool | str]
    patches: list[PatchRef]
    locked_files: dict[str, str] = Field(description="path -> sha256 in the trial's workspace")
    contract_hash: str | None = None
    mem_cap_bytes: int | None = Field(
        description="per-rank capacity; the censoring bound of an oom"
    )
    timeout_s: float
    slow_after_s: float | None = Field(
        None,
        description="the search's bound: past it the trial was to be cut short and recorded slow",
    )
    censored_time_per_step_s: float | None = Field(
        None,
        description="for a slow trial: the objective's time per step it was at least "
        "(right-censored), as the search set its bound",
    )
    window_step_time_s: float | None = Field(
        None,
        description="a patched search trial under a throughput objective: its steady step "
        "charged by the harness's window against the Doctor's baseline (``run.screened``); it "
        "ranks on the larger of this and its lines, never on its lines alone",
    )
    started_unix_s: float
    cost_s: float = Field(description="wall time the trial cost the harness, set-up included")
    error: str | None = None
    warnings: list[str] = Field([], description="what went wrong without changing the status")
    metrics: TrialMetrics | None = None
    evaluation: Evaluation | None = None
    commands: list[list[str]] = Field([], description="the launch command of each node")
    isolation: str = Field(
        "",
        description="namespace: the trial saw its own folder only, the "
        "rest read-only, no capabilities; or why not",
    )
    seed: int | None = Field(
        None,
        description="the challenge seed the harness drew and set for this run (None: the "
        "contract's seeds)",
    )
    steps: int | None = Field(
        None,
        description="the optimizer steps the harness asked for instead of the scale's (Apply's "
        "timed runs); None: the scale's",
    )
    seed_set_by: str = Field(
        "",
        description="how the challenge seed reached the workload: 'parameter' (its seed "
        "parameters) or 'bootstrap' (every seed the script sets, offset)",
    )
    ownership: str = Field(
        "",
        description="who owned the trial's processes: 'pid namespace; ...' (none outlived the "
        "launcher, the network it had), or why the harness could not",
    )
    returncode: int | None = None
    trial_dir: str = ""
    node: str = Field("local", description="where it ran: 'local', or the cluster node's id")
    launcher_nodes: list[str] = Field(
        [],
        description="a workload spread over nodes: the node "
        "of each launcher, in launcher order (empty: all on "
        "``node``)",
    )
    hosts: list[str] = Field(
        [],
        description="on a cluster: the address of each launcher's host, in launcher order "
        "(the first: where the trial ran); empty for a trial run here",
    )
    fingerprint: str = Field(
        "",
        description="the fingerprint of the host that ran it: times "
        "compare only between equal fingerprints",
    )

    @property
    def measured(self) -> TrialMetrics:
        """The metrics of a trial that measured them (an ``ok`` one); ValueError otherwise."""
        if self.metrics is None:
            raise ValueError(f"trial {self.trial_id} ended {self.status}: it measured nothing")
        return self.metrics

    def moved(self, old_root: str, new_root: str) -> TrialRecord:
        """This record with its files' paths (its folder, the weights the harness saved) under
        ``new_root`` where they were under ``old_root``: a trial folder that travelled from a
        cluster node. What ran there (``commands``) keeps the node's paths."""

        def move(path: str | None) -> str | None:
            if not path or not _under(path, old_root):
                return path
            return str(Path(new_root) / Path(path).relative_to(old_root))

        evaluation = self.evaluation
        if evaluation is not None:
            evaluation = evaluation.model_copy(
                update={
                    "final_weights": move(evaluation.final_weights),
                    "initial_weights": move(evaluation.initial_weights),
                }
            )
        return self.model_copy(
            update={"trial_dir": move(self.trial_dir) or "", "evaluation": evaluation}
        )

    @field_validator("schema_version")
    @classmethod
    def _readable(cls, version: int) -> int:
        if version > RECORD_SCHEMA_VERSION:
            raise ValueError(
                f"a trial record of schema version {version}; this InfraRSI reads up to "
                f"{RECORD_SCHEMA_VERSION}: upgrade InfraRSI to read it"
            )
        return version

    @field_validator("status")
    @classmethod
    def _finished(cls, status: TrialStatus) -> TrialStatus:
        if not status.is_finished():
            raise ValueError(f"a trial record holds a finished status, not {status}")
        return status

    def save(self, path: Path) -> None:
        """Write the record as JSON, atomically (a reader never sees half a record)."""
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json(indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> TrialRecord:
        """Read a record written by ``save``."""
        return cls.from_json(Path(path).read_text())

    @classmethod
    def from_json(cls, text: str) -> TrialRecord:
        """A record from its JSON text (as ``save`` writes it, or as a node sends it): the one
        reader of a trial record's text."""
        return cls.model_validate_json(text)


def _under(path: str, root: str) -> bool:
    return Path(path).is_relative_to(root)


class TrialBase(BaseModel):
    """What the harness knows of a trial before its outcome — its identity, configuration,
    provenance and bounds, and then what the launch learns of where and how it ran — frozen:
    each thing learned makes a new base (``model_copy``). ``record`` is the trial's record with
    the outcome beside it."""

    model_config = ConfigDict(frozen=True)

    trial_id: str
    workload: str
    scale: str
    knobs: dict[str, int | float | bool | str]
    contract_hash: str | None
    mem_cap_bytes: int | None
    timeout_s: float
    slow_after_s: float | None
    started_unix_s: float
    trial_dir: str
    fingerprint: str
    node: str
    hosts: list[str]
    seed: int | None
    steps: int | None
    seed_set_by: str
    isolation: str
    patches: list[PatchRef] = []
    locked_files: dict[str, str] = {}
    ownership: str = ""
    launcher_nodes: list[str] = []
    censored_time_per_step_s: float | None = None

    def record(self, **outcome: Any) -> TrialRecord:
        """The trial's record: this base, and ``outcome`` (its status, cost and the rest)."""
        return TrialRecord(**dict(self), **outcome)
