"""The workload manifest (``workload.yaml``): how to launch a training job, its knobs and patches.

A manifest is written by hand, so it is validated strictly and every error names the field and
says how to fix it. The typed models here are the only way a manifest is read.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from infrarsi.errors import InfraRSIError, UnknownNameError, field_problems
from infrarsi.paths import read_text
from infrarsi.workloads import expr
from infrarsi.workloads.stdout import ObservedMetrics, StdoutMetrics

T = TypeVar("T")

KnobValue = int | float | bool | str
# What a knob or patch is for, in words the diagnosis speaks: a finding names roles, and the
# knobs and patches of any workload that carry them are what it suggests.
Role = Literal[
    "ranks",
    "threads",
    "micro_batch",
    "grad_accum",
    "precision",
    "compile",
    "activation_checkpointing",
    "attention",
    "communication",
    "memory_saver",
    "optimizer",
    "dispatch",
    "data",
    "matmul",
    "other",
]
# Filled in by the harness for each launcher: its folder, node index, node count, the
# rendezvous host (loopback when every launcher runs here; the first launcher's node address
# when a cluster spreads them) and a free port there, and the trial's id.
HARNESS_FIELDS = frozenset(
    {"workspace", "node_rank", "nodes", "rdzv_host", "rdzv_port", "trial_id"}
)


class ManifestError(InfraRSIError):
    """A manifest that cannot be read or does not validate; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Knob(_Strict):
    """One launch parameter: its type, its domain, and its baseline value (``default``)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    type: Literal["int", "float", "bool", "choice"]
    values: list[KnobValue] = []  # required: the validator names it when missing
    default: KnobValue | None = None
    derive: str | None = Field(None, description="expression giving the value when unset")
    flag: str | None = Field(
        None,
        pattern=r"^-",
        description="bool knobs only: the switch "
        "(e.g. --bf16) the command holds when true and lacks when false; "
        "write the knob as its own command item, '{name}'",
    )
    role: Role | None = Field(None, description="what the knob is for, for the diagnosis")
    inert_when: str | None = Field(
        None,
        description="expression over the other knobs and the scale's parameters under which "
        "this knob changes nothing (accum_no_sync at grad_accum 1): its value is then its "
        "default, so two configurations that differ only in it are one",
    )
    help: str = ""

    @model_validator(mode="after")
    def _check_domain(self) -> Knob:
        if self.flag is not None and self.type != "bool":
            raise ValueError(
                f"knob {self.name!r}: 'flag' is for bool knobs; this one is {self.type}"
            )
        if self.type == "bool":
            object.__setattr__(self, "values", [False, True])
        if not self.values:
            raise ValueError(f"knob {self.name!r}: give 'values', the list of allowed values")
        if self.default is None and self.derive is None:
            raise ValueError(f"knob {self.name!r}: give a 'default' (the baseline) or 'derive'")
        if self.default is not None and self.coerce(self.default) not in self.values:
            raise ValueError(
                f"knob {self.name!r}: default {self.default!r} is not in values {self.values}"
            )
        if self.derive is not None:
            expr.parse(self.derive)
        if self.inert_when is not None:
            if self.default is None:
                raise ValueError(
                    f"knob {self.name!r}: 'inert_when' sets the knob to its default; give one"
                )
            expr.parse(self.inert_when)
        return self

    def coerce(self, value: Any) -> KnobValue:
        """Turn a value given on the command line or in YAML into this knob's type."""
        if self.type == "bool":
            if isinstance(value, str):
                if value.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(f"{self.name}: {value!r} is not a boolean (true/false)")
                return value.lower() in ("1", "true", "yes", "on")
            return bool(value)
        if self.type in ("int", "float"):
            return self._number(value)
        return str(value)

    def _number(self, value: Any) -> int | float:
        """``value`` as this knob's int or float; ValueError naming the knob and its values."""
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = None
        if number is None or (self.type == "int" and not number.is_integer()):
            kind = "an integer" if self.type == "int" else "a number"
            raise ValueError(f"{self.name}: {value!r} is not {kind}; one of {self.values}")
        return int(number) if self.type == "int" else number


class Constraint(_Strict):
    """A condition every knob assignment must meet, with the reason a person reads on failure."""

    expr: str
    why: str

    @field_validator("expr")
    @classmethod
    def _parses(cls, text: str) -> str:
        expr.parse(text)
        return text


class Scale(_Strict):
    """A size preset: the workload's fixed parameters and how long a trial may take."""

    params: dict[str, KnobValue]
    knob_defaults: dict[str, KnobValue] = {}
    warmup_steps: int = Field(ge=0)
    timeout_s: float = Field(gt=0)

    @field_validator("params")
    @classmethod
    def _has_steps(cls, params: dict[str, KnobValue]) -> dict[str, KnobValue]:
        if "steps" not in params:
            raise ValueError("params must include 'steps', the number of optimizer steps")
        return params


class Launch(_Strict):
    """The launch command and environment, as templates over knobs and scale parameters.

    ``nodes`` launchers are started, one per simulated node, each with its ``{node_rank}``.
    ``stop_after_steps``: the job takes no step count, and the harness ends it after the
    scale's ``steps`` optimizer steps instead.
    """

    command: list[str] = Field(min_length=1)
    nodes: int = Field(1, ge=1)
    env: dict[str, str] = {}
    metrics: Literal["probe"] | ObservedMetrics | StdoutMetrics = Field(
        "probe",
        description="probe: the script's own probe lines; observed: the optimizer's steps as "
        "the harness's observer sees them; else the stdout patterns that read its steps",
    )
    stop_after_steps: bool = Field(
        False,
        description="no argument of the job sets its number of optimizer steps: the harness's "
        "observer ends every rank cleanly after the scale's steps (sandbox/_hooks/"
        "infrarsi_observe.py), the job's own schedule otherwise",
    )

    def steps_printed(self, steps: int) -> int:
        """The optimizer steps (step lines) a run given ``steps`` makes."""
        offset = 0 if self.metrics == "probe" else self.metrics.steps_offset
        return steps + offset

    @property
    def on_channel(self) -> bool:
        """The ranks report on the harness's socket (the probe's lines, or the observer's),
        not on their standard output."""
        return not isinstance(self.metrics, StdoutMetrics)

    @property
    def observed(self) -> bool:
        """The steps are the observer's (``metrics: observed``)."""
        return isinstance(self.metrics, ObservedMetrics)

    def passes_steps(self) -> bool:
        """Whether the launch hands the scale's ``steps`` to the job (a ``{steps}`` field in the
        command or the environment): only then can the harness run it for more steps."""
        if self.stop_after_steps:
            return True
        parts = [*self.command, *self.env.values()]
        return any(
            name == "steps" for part in parts for _, name, _, _ in string.Formatter().parse(part)
        )


class Invariants(_Strict):
    """What must not change: tokens per optimizer step, and how far the loss may drift."""

    tokens_per_step: str
    loss_rtol: float = Field(
        gt=0, description="relative loss tolerance, point-wise per step, between two fp32 runs"
    )
    loss_rtol_bf16: float | None = Field(
        None,
        gt=0,
        description="the same when either run computes in bf16 (looser); None = loss_rtol",
    )

    def rtol(self, *precisions: str) -> float:
        """The loss tolerance between runs at these precisions."""
        if "bf16" in precisions and self.loss_rtol_bf16 is not None:
            return self.loss_rtol_bf16
        return self.loss_rtol


class Flops(_Strict):
    """Model FLOPs per trained token (forward + backward), as an expression over the scale's
    parameters and knobs, with the formula written out for people."""

    per_token: str
    formula: str


class MemoryEstimate(_Strict):
    """An analytic peak memory per rank in bytes (runtime, parameters, gradients, optimizer
    state, activations per micro-batch) as an expression over the scale's parameters and knobs,
    with the formula written out; the memory model's prior mean, which trials then correct."""

    per_rank_bytes: str
    formula: str


class Evaluation(_Strict):
    """How the harness checks what a trial learned, with evidence no patch can write.

    ``final_weights`` (and ``initial_weights``) say where the trial's parameters are, relative
    to its workspace; ``{weights_dir}`` is where ``probe.save_weights`` puts them. ``key``: the
    saved object holds the parameters under this key (nanoGPT's checkpoints: ``model``).
    ``command`` runs in an unpatched copy of the workload with ``{weights}`` and
    ``{initial_weights}`` filled in, and prints a JSON line with ``eval_loss`` (and
    ``initial_eval_loss``, ``layout_problems``): the reference code's judgement.

    ``framework`` (a script that saves no parameters the harness can read): the harness saves
    them itself in every trial, through the framework the script is written on (``trainer``:
    around ``transformers.Trainer.train``; ``accelerate``: the model ``Accelerator.prepare``
    is given, at prepare and at exit; see ``sandbox/_hooks/infrarsi_params.py``). With
    ``trainer``, ``command`` is the script's own command: the harness runs it unpatched with
    ``Trainer.train`` replaced by the Trainer's own evaluation of each saved set of parameters
    (its held-out set, ``eval_dataset``), so the script builds the model and the data as the
    trial did. ``optimizer`` (any script that trains with a ``torch.optim`` optimizer): the
    harness's observer saves the parameters the optimizer holds, named by the module that owns
    them, before its first step and after its last (``sandbox/_hooks/infrarsi_observe.py``).
    ``lightning``: saved as ``optimizer`` saves them; ``command`` is the script's own command,
    run unpatched with ``Trainer.fit`` replaced by ``Trainer.validate`` of each saved set on the
    validation loader the script gives it.
    """

    final_weights: str = "{weights_dir}/final.pt"
    initial_weights: str | None = "{weights_dir}/initial.pt"
    key: str | None = None
    command: list[str] | None = None
    framework: Literal["trainer", "accelerate", "optimizer", "lightning"] | None = None


EVALUATION_FIELDS = frozenset({"weights", "initial_weights", "weights_dir"})


class Files(_Strict):
    """Globs, relative to the workload folder, of files a patch may and may never touch."""

    editable: list[str]
    locked: list[str]


class Prior(_Strict):
    """Expected effect of a patch, as ratios to the baseline (0.8 = 20% lower)."""

    step_time_ratio: float = Field(gt=0)
    peak_mem_ratio: float = Field(gt=0)


class PatchSpec(_Strict):
    """A catalog entry: a unified diff shipped with the workload, with its metadata."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    file: str
    title: str
    category: Literal["kernel", "memory", "communication"]
    roles: list[Role] = Field([], description="what the patch addresses, for the diagnosis")
    prior: Prior
    conflicts: list[str] = []


class Manifest(_Strict):
    """A workload: what to run, its knob space, its invariants, its files and its patch catalog."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    description: str
    launch: Launch
    scales: dict[str, Scale]
    knobs: list[Knob] = Field(min_length=1)
    constraints: list[Constraint] = []
    invariants: Invariants
    flops: Flops | None = None
    memory: MemoryEstimate | None = None
    evaluation: Evaluation | None = None
    files: Files
    patches: list[PatchSpec] = []
    root: Path = Field(Path("."), exclude=True, description="folder the manifest was read from")
    source: Path | None = Field(None, exclude=True, description="the manifest file read")

    @model_validator(mode="after")
    def _check_cross_fields(self) -> Manifest:
        _check_unique("knobs", [k.name for k in self.knobs])
        _check_unique("patches", [p.id for p in self.patches])
        patch_ids = {p.id for p in self.patches}
        for i, patch in enumerate(self.patches):
            for other in patch.conflicts:
                if other not in patch_ids:
                    raise ValueError(f"patches[{i}].conflicts: unknown patch id {other!r}")
        for scale_name, scale in self.scales.items():
            self._check_scale(scale_name, scale)
        self._check_flags()
        return self

    def _check_flags(self) -> None:
        for knob in self.knobs:
            if knob.flag is None:
                continue
            for where, template in self._templates():
                if f"{{{knob.name}}}" in template and template != f"{{{knob.name}}}":
                    raise ValueError(
                        f"{where}: flag knob {knob.name!r} must be a command item "
                        f"of its own, '{{{knob.name}}}' (it renders as "
                        f"{knob.flag} or nothing), not {template!r}"
                    )

    def knobs_with_role(self, role: str) -> list[str]:
        """Names of the knobs that carry ``role``."""
        return [k.name for k in self.knobs if k.role == role]

    def patches_with_role(self, role: str) -> list[str]:
        """Ids of the catalog patches that carry ``role``."""
        return [p.id for p in self.patches if role in p.roles]

    def _check_scale(self, scale_name: str, scale: Scale) -> None:
        knob_names = {k.name for k in self.knobs}
        clash = knob_names & set(scale.params)
        if clash:
            raise ValueError(f"scales.{scale_name}.params: {sorted(clash)} are knobs, not params")
        for name, value in scale.knob_defaults.items():
            if name not in knob_names:
                raise ValueError(f"scales.{scale_name}.knob_defaults: unknown knob {name!r}")
            if self.knob(name).coerce(value) not in self.knob(name).values:
                raise ValueError(
                    f"scales.{scale_name}.knob_defaults.{name}: {value!r} not in "
                    f"values {self.knob(name).values}"
                )
        known = knob_names | set(scale.params) | HARNESS_FIELDS
        for where, text in self._expressions():
            unknown = expr.names(text) - known
            if unknown:
                raise ValueError(
                    f"{where}: unknown name(s) {sorted(unknown)} at scale "
                    f"{scale_name!r}; known: {sorted(known)}"
                )
        for where, template in self._templates():
            allowed = known | EVALUATION_FIELDS if where.startswith("evaluation.") else known
            for field in _template_fields(template):
                if field not in allowed:
                    raise ValueError(
                        f"{where}: unknown placeholder {{{field}}} at scale "
                        f"{scale_name!r}; known: {sorted(known)}"
                    )

    def _expressions(self) -> list[tuple[str, str]]:
        out = [(f"constraints[{i}].expr", c.expr) for i, c in enumerate(self.constraints)]
        out += [(f"knobs.{k.name}.derive", k.derive) for k in self.knobs if k.derive]
        if self.flops is not None:
            out.append(("flops.per_token", self.flops.per_token))
        if self.memory is not None:
            out.append(("memory.per_rank_bytes", self.memory.per_rank_bytes))
        return out + [("invariants.tokens_per_step", self.invariants.tokens_per_step)]

    def _templates(self) -> list[tuple[str, str]]:
        out = [(f"launch.command[{i}]", t) for i, t in enumerate(self.launch.command)]
        out += [(f"launch.env.{k}", v) for k, v in self.launch.env.items()]
        if self.evaluation is not None:
            out += [
                (f"evaluation.command[{i}]", t) for i, t in enumerate(self.evaluation.command or [])
            ]
        return out

    @property
    def path(self) -> Path:
        """The manifest file."""
        return self.root / "workload.yaml" if self.source is None else self.source

    def knob(self, name: str) -> Knob:
        """The knob called ``name``; KeyError naming the known knobs otherwise."""
        return self._named("knob", {k.name: k for k in self.knobs}, name)

    def scale(self, name: str) -> Scale:
        """The scale preset called ``name``; KeyError naming the known scales otherwise."""
        if name not in self.scales:
            raise UnknownNameError(f"unknown scale {name!r}; {self.name} has {sorted(self.scales)}")
        return self.scales[name]

    def patch(self, patch_id: str) -> PatchSpec:
        """The catalog entry ``patch_id``; KeyError naming the catalog otherwise."""
        return self._named("patch", {p.id: p for p in self.patches}, patch_id)

    def _named(self, what: str, known: dict[str, T], name: str) -> T:
        """``known[name]``; UnknownNameError naming what this workload has otherwise."""
        if name not in known:
            raise UnknownNameError(f"unknown {what} {name!r}; {self.name} has {list(known)}")
        return known[name]

    def patch_path(self, patch_id: str) -> Path:
        """Where the diff of catalog patch ``patch_id`` lies on disk."""
        return self.root / self.patch(patch_id).file


def _check_unique(field: str, names: list[str]) -> None:
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{field}: duplicate names {dupes}")


def _template_fields(template: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(template) if f]


def _format_errors(path: Path, exc: ValidationError) -> str:
    lines = [f"{path}: invalid workload manifest"]
    lines += [f"  {line}" for line in field_problems(exc.errors())]
    return "\n".join(lines)


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a manifest file (or the ``workload.yaml`` inside a folder)."""
    path = Path(path)
    if path.is_dir():
        path = path / "workload.yaml"
    if not path.exists():
        raise ManifestError(f"{path}: no such manifest")
    try:
        data = yaml.safe_load(read_text(path, "workload manifest"))
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: a manifest is a YAML mapping with name, launch, knobs, ...")
    try:
        manifest = Manifest.model_validate(
            {**data, "root": path.parent.resolve(), "source": path.resolve()}
        )
    except ValidationError as exc:
        raise ManifestError(_format_errors(path, exc)) from None
    for i, patch in enumerate(manifest.patches):
        if not manifest.patch_path(patch.id).is_file():
            raise ManifestError(f"{path}: field 'patches.{i}.file': {patch.file} does not exist")
    problems = _file_problems(manifest)
    if problems:
        raise ManifestError("\n".join([f"{path}: invalid workload manifest", *problems]))
    return manifest


def _file_problems(manifest: Manifest) -> list[str]:
    """Each ``files`` glob that reaches outside the workload folder, or (locked) matches no
    file in it: a lock on nothing protects nothing, and says the path is mistyped."""
    import fnmatch

    root = manifest.root
    present = [
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]
    out = []
    for kind in ("editable", "locked"):
        for i, glob in enumerate(getattr(manifest.files, kind)):
            where = f"field 'files.{kind}.{i}'"
            if glob.startswith("/") or ".." in Path(glob).parts:
                out.append(
                    f"  {where}: {glob!r} is outside the workload folder: give a path "
                    f"relative to {root}, inside it"
                )
            elif kind == "locked" and not any(fnmatch.fnmatchcase(f, glob) for f in present):
                out.append(f"  {where}: {glob!r} matches no file in {root}: check its spelling")
    return out
