"""The command a user runs today, read apart: the launcher (``python``, ``torchrun`` — also as
``python -m torch.distributed.run`` — or ``accelerate launch``, with its own options), the
script, and the arguments given to the script — what a manifest's launch template is drafted
from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from infrarsi.errors import InfraRSIError

PYTHONS = ("python", "python3")
TORCHRUN = ("torchrun",)
# torchrun's options that take a value (both spellings are accepted by torchrun)
TORCHRUN_VALUED = {
    "--nproc-per-node",
    "--nproc_per_node",
    "--nnodes",
    "--node-rank",
    "--node_rank",
    "--master-addr",
    "--master_addr",
    "--master-port",
    "--master_port",
    "--rdzv-backend",
    "--rdzv_backend",
    "--rdzv-endpoint",
    "--rdzv_endpoint",
    "--rdzv-id",
    "--rdzv_id",
    "--max-restarts",
    "--max_restarts",
    "--monitor-interval",
    "--monitor_interval",
    "--log-dir",
    "--log_dir",
}
# accelerate launch's options that take no value (every other option of it takes one)
ACCELERATE_SWITCHES = {
    "--cpu",
    "--multi_gpu",
    "--multi-gpu",
    "--tpu",
    "--ipex",
    "--mps",
    "--use_cpu",
    "--use_deepspeed",
    "--use_fsdp",
    "--use_megatron_lm",
    "--same_network",
    "--same-network",
    "--debug",
    "-q",
    "--quiet",
    "--no_python",
    "--no-python",
    "-m",
    "--module",
}
# the options that say how many ranks there are, per launcher
NPROC_OPTIONS = {
    "torchrun": ("--nproc-per-node", "--nproc_per_node"),
    "accelerate": ("--num_processes", "--num-processes"),
}


class CommandError(InfraRSIError):
    """The command cannot be drafted from (no script, an unknown launcher)."""


@dataclass(frozen=True)
class Given:
    """One argument the user gave the script: ``--name value``, ``--name=value``, a bare
    switch (``value`` None) or a positional (``option`` None)."""

    option: str | None
    value: str | None


@dataclass(frozen=True)
class Command:
    """A user's command: launcher, its options, the script and what the script was given."""

    launcher: str  # "python", "torchrun" or "accelerate" (accelerate launch)
    launcher_options: dict[str, str | None] = field(default_factory=dict)
    script: str = ""
    given: tuple[Given, ...] = ()

    def nproc(self) -> int | None:
        """The launcher's ranks per node, when given as a number."""
        for key in NPROC_OPTIONS.get(self.launcher, ()):
            value = self.launcher_options.get(key)
            if value is not None and value.isdigit():
                return int(value)
        return None


def parse_command(argv: list[str]) -> Command:
    """``argv`` read apart (``python [-u] train.py ARGS`` or ``torchrun [OPTS] train.py ARGS``);
    CommandError naming what is missing."""
    if not argv:
        raise CommandError("give the command you run today after --, e.g. -- python train.py")
    head = argv[0].rsplit("/", 1)[-1]
    rest = list(argv[1:])
    options: dict[str, str | None]
    if head in PYTHONS:
        launcher, options = "python", {}
        while rest and rest[0].startswith("-") and rest[0] != "-m":
            options[rest.pop(0)] = None  # python's own switches (-u, -O ...)
        if rest[:2] in (["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"]):
            return parse_command(["torchrun", *rest[2:]])  # torchrun by its module's name
        if rest and rest[0] == "-m":
            raise CommandError("python -m MODULE: give the script's path (python path/to/train.py)")
    elif head in TORCHRUN:
        launcher, options = "torchrun", _options(rest, lambda w: w in TORCHRUN_VALUED)
    elif head == "accelerate" and rest[:1] == ["launch"]:
        rest.pop(0)
        launcher, options = "accelerate", _options(rest, lambda w: w not in ACCELERATE_SWITCHES)
        if "-m" in options or "--module" in options or "--no_python" in options:
            raise CommandError("accelerate launch -m/--no_python: give the script's path")
    else:
        raise CommandError(
            f"{argv[0]!r}: the command must start with python, torchrun or accelerate launch "
            "(e.g. -- torchrun --nproc-per-node 2 train.py --batch_size 8)"
        )
    if not rest or not rest[0].endswith(".py"):
        raise CommandError(f"no script (a .py file) after {argv[0]}: got {rest[:1] or 'nothing'}")
    return Command(launcher, options, rest[0], tuple(_given(rest[1:])))


def _options(rest: list[str], valued: Callable[[str], bool]) -> dict[str, str | None]:
    """The launcher's own options, taken off the front of ``rest`` (``valued``: whether an
    option takes the next word as its value)."""
    options: dict[str, str | None] = {}
    while rest and rest[0].startswith("-"):
        word = rest.pop(0)
        if "=" in word:
            key, value = word.split("=", 1)
            options[key] = value
        elif valued(word) and rest:
            options[word] = rest.pop(0)
        else:
            options[word] = None  # --standalone and the like
    return options


def _given(words: list[str]) -> list[Given]:
    """The script's arguments: ``--k=v``, ``--k v`` (a value is a word not starting with
    ``--``), bare switches and positionals."""
    out: list[Given] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--") and "=" in word:
            key, value = word.split("=", 1)
            out.append(Given(key, value))
        elif word.startswith("-") and not _number(word):
            nxt = words[i + 1] if i + 1 < len(words) else None
            if nxt is not None and (not nxt.startswith("-") or _number(nxt)):
                out.append(Given(word, nxt))
                i += 1
            else:
                out.append(Given(word, None))
        else:
            out.append(Given(None, word))
        i += 1
    return out


def _number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True
