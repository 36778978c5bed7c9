"""Proposers: where the search's code patches come from, behind the one interface the run loop
calls (``infrarsi.proposal.Proposer``).

- ``catalog``: the patches a person wrote into the workload's manifest — nothing is proposed
  during the run; the catalog is searched from the first trial.
- ``llm``: patches an OpenAI-compatible LLM writes for this workload, each validated before it
  may cost a trial (``llm``, ``validate``); the catalog is left out unless the endpoint fails.
- ``both``: the catalog and the LLM's patches (the default when an endpoint is configured).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from infrarsi.contract import Contract
from infrarsi.errors import InfraRSIError
from infrarsi.executors import Executor
from infrarsi.proposal import ProposesNothing
from infrarsi.proposers.llm import Endpoint, EndpointError, LLMBudget, LLMProposer, configured
from infrarsi.records import DoctorReport

KINDS = ("catalog", "llm", "both")

__all__ = [
    "KINDS",
    "CatalogProposer",
    "EndpointError",
    "LLMBudget",
    "LLMProposer",
    "check_kind",
    "default_kind",
    "make_proposer",
]


class CatalogProposer(ProposesNothing):
    """Today's behaviour: the workload's catalog, searched from the start; proposes nothing."""

    name = "catalog"


def default_kind() -> str:
    """``both`` when an LLM endpoint is configured, else ``catalog``."""
    return "both" if configured() else "catalog"


def check_kind(kind: str | None) -> str:
    """The proposer kind to use (None: ``default_kind()``), checked before anything runs:
    ValueError naming the choices, EndpointError naming the variables an LLM kind needs (and,
    for ``llm`` alone, an endpoint that does not answer; ``both`` falls back on the catalog)."""
    kind = kind or default_kind()
    if kind not in KINDS:
        raise InfraRSIError(f"proposer {kind!r}: choose one of {', '.join(KINDS)}")
    if kind != "catalog":
        endpoint = Endpoint.from_env()
        if kind == "llm":  # nothing to fall back on: an endpoint that does not answer ends here
            endpoint.check_reachable()
    return kind


def make_proposer(
    kind: str | None,
    contract: Contract,
    run_dir: Path,
    executor: Executor,
    report: DoctorReport | None = None,
    budget: LLMBudget = LLMBudget(),
    on_note: Callable[[str], None] | None = None,
):
    """The proposer ``kind`` names (None: ``default_kind()``); ValueError naming the choices,
    EndpointError naming the variables when ``llm``/``both`` has no endpoint."""
    kind = check_kind(kind)
    if kind == "catalog":
        return CatalogProposer()
    return LLMProposer(
        contract,
        run_dir,
        executor,
        Endpoint.from_env(),
        budget,
        report,
        with_catalog=kind == "both",
        on_note=on_note,
    )
