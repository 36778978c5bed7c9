"""The options several commands share, declared once, and how the parsed values become the
frozen options objects (``infrarsi.options``) the layers below take."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast, get_type_hints

import typer

from infrarsi.options import BankOptions, ExecutorOptions, LLMBudget, ProposerOptions

BANK = typer.Option(
    None,
    "--bank",
    help="the experience bank's URL or SQLite path (default: "
    "INFRARSI_BANK, else ~/.infrarsi/bank.sqlite)",
)
NO_BANK = typer.Option(
    False, "--no-bank", help="leave the experience bank out: nothing read from it or added to it"
)
PROPOSER = typer.Option(
    None,
    "--proposer",
    help="where code patches come from: catalog, llm "
    "or both (default: both when INFRARSI_LLM_BASE_URL and "
    "INFRARSI_LLM_MODEL are set, else catalog)",
)
LLM_CALLS = typer.Option(6, "--llm-max-calls", min=1, help="LLM requests per run")
LLM_TOKENS = typer.Option(
    400_000, "--llm-max-tokens", min=1, help="LLM tokens per run (prompts and replies)"
)
LLM_SECONDS = typer.Option(
    1800.0,
    "--llm-max-seconds",
    min=1,
    help="seconds per run spent asking the LLM and validating its patches",
)
EXECUTOR = typer.Option(
    "local",
    "--executor",
    help="where trials run: local (this machine, one at a time) or ray (a Ray cluster)",
)
RAY_ADDRESS = typer.Option(
    None, "--ray-address", help="the Ray cluster: HOST:PORT or auto (default auto)"
)
PARALLEL = typer.Option(
    1,
    "--parallel",
    min=1,
    help="search trials in flight at once (on a "
    "Ray cluster: one per node; the local executor runs one at a time)",
)
JSON = typer.Option(False, "--json", help="end with one JSON object")
SEED = typer.Option(0, help="the searcher's random seed")
# the default a grouped parameter declares (``grouped`` puts its group's options in its place)
GROUPED: Any = None


def bank_options(url: str | None, no_bank: bool) -> BankOptions:
    """``--bank`` and ``--no-bank``."""
    return BankOptions(url=url, use=not no_bank)


def executor_options(kind: str, ray_address: str | None) -> ExecutorOptions:
    """``--executor`` and ``--ray-address``."""
    return ExecutorOptions(kind=kind, ray_address=ray_address)


def proposer_options(kind: str | None, calls: int, tokens: int, seconds: float) -> ProposerOptions:
    """``--proposer`` and the LLM's caps per run."""
    return ProposerOptions(
        kind=kind, llm_budget=LLMBudget(calls=calls, tokens=tokens, seconds=seconds)
    )


@dataclass(frozen=True)
class OptionGroup:
    """Options that together make one typed options object: each option's parameter name,
    type and ``typer.Option``, and how their parsed values become the object."""

    params: tuple[tuple[str, Any, Any], ...]
    build: Callable[..., Any]


GROUPS = {  # a command's parameter of this name receives the group's object
    "bank": OptionGroup((("bank", str | None, BANK), ("no_bank", bool, NO_BANK)), bank_options),
    "proposer": OptionGroup(
        (
            ("proposer", str | None, PROPOSER),
            ("llm_calls", int, LLM_CALLS),
            ("llm_tokens", int, LLM_TOKENS),
            ("llm_seconds", float, LLM_SECONDS),
        ),
        proposer_options,
    ),
    "executor": OptionGroup(
        (("executor", str, EXECUTOR), ("ray_address", str | None, RAY_ADDRESS)),
        executor_options,
    ),
}

Command = TypeVar("Command", bound=Callable[..., Any])


def grouped(command: Command) -> Command:
    """A command whose parameters named in ``GROUPS`` (``bank``, ``proposer``, ``executor``)
    receive the typed options objects: Typer is shown each group's options in their place,
    declared once here, and the command is called with the object they build."""
    hints = get_type_hints(command)
    own = inspect.signature(command).parameters.values()
    params, groups = [], []
    for p in own:
        if p.name in GROUPS:
            groups.append(p.name)
            params += [
                inspect.Parameter(name, p.kind, default=o, annotation=t)
                for name, t, o in GROUPS[p.name].params
            ]
        else:
            params.append(p.replace(annotation=hints.get(p.name, p.annotation)))

    @functools.wraps(command)
    def call(**values: Any) -> Any:
        for name in groups:
            group = GROUPS[name]
            values[name] = group.build(*(values.pop(n) for n, _, _ in group.params))
        return command(**values)

    call.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    return cast(Command, call)
