"""The options several commands share, declared once, and how the parsed values become the
frozen options objects (``infrarsi.options``) the layers below take."""

from __future__ import annotations

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
