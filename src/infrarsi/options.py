"""The options of a run, frozen and passed by keyword: what the command line parses once and
every layer below reads, instead of long positional lists.

``Budget`` resolves in one place: what the command line gave, else what the contract says, else
``DEFAULT_BUDGET_TRIALS`` trials. The other objects group the options of one concern each: the
search (``SearchOptions``), where trials run (``ExecutorOptions``), where code patches come from
(``ProposerOptions``, with the LLM's ``LLMBudget``), the experience bank (``BankOptions``), and
all of ``optimize`` (``OptimizeOptions``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from infrarsi.errors import InfraRSIError

DEFAULT_BUDGET_TRIALS = 20  # a run's trials when neither the command line nor the contract says


class ContractBudget(Protocol):
    """What a contract says of the budget (``contract.Budget``)."""

    @property
    def trials(self) -> int | None: ...

    @property
    def wall_time_s(self) -> float | None: ...


@dataclass(frozen=True, kw_only=True)
class Budget:
    """How much a search may spend: trials, seconds of trial time, or both (whichever ends
    first). Both None: not given here, so the contract's (``resolve``)."""

    trials: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        if self.trials is not None and self.trials < 1:
            raise InfraRSIError(f"budget {self.trials} trials: give 1 or more")
        if self.seconds is not None and self.seconds <= 0:
            raise InfraRSIError(f"budget {self.seconds:g} s: give a positive number of seconds")

    @property
    def given(self) -> bool:
        """Whether any part was given (else the contract's budget applies)."""
        return self.trials is not None or self.seconds is not None

    def resolve(self, contract: ContractBudget) -> Budget:
        """This budget where given, else the contract's, else ``DEFAULT_BUDGET_TRIALS``."""
        if self.given:
            return self
        return Budget(trials=contract.trials or DEFAULT_BUDGET_TRIALS, seconds=contract.wall_time_s)


@dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """How the Run stage searches: which searcher, its budget and seed, how many trials in
    flight at once, and the store it records into (None: ``run.sqlite`` in the run folder)."""

    searcher: str = "infrarsi"
    budget: Budget = field(default_factory=Budget)
    seed: int = 0
    parallel: int = 1
    store_url: str | None = None

    def __post_init__(self) -> None:
        if self.parallel < 1:
            raise InfraRSIError(f"parallel {self.parallel}: give 1 or more trials in flight")


@dataclass(frozen=True, kw_only=True)
class ExecutorOptions:
    """Where every stage's trials run: ``local`` (this machine, one at a time) or ``ray`` (the
    cluster at ``ray_address``; None: ``RAY_ADDRESS`` or a local cluster)."""

    kind: str = "local"
    ray_address: str | None = None


@dataclass(frozen=True, kw_only=True)
class LLMBudget:
    """Caps per run: chat requests, tokens (prompt and reply), and seconds spent in requests
    and validation together."""

    calls: int = 6
    tokens: int = 400_000
    seconds: float = 1800.0
    calls_per_round: int = 3  # requests in one round, until one patch is accepted


@dataclass(frozen=True, kw_only=True)
class ProposerOptions:
    """Where code patches come from: ``catalog``, ``llm`` or ``both`` (None: ``both`` when an
    LLM endpoint is configured, else ``catalog``), and what the LLM may spend."""

    kind: str | None = None
    llm_budget: LLMBudget = field(default_factory=LLMBudget)


@dataclass(frozen=True, kw_only=True)
class BankOptions:
    """The experience bank: its URL or SQLite path (None: ``INFRARSI_BANK``, else
    ``~/.infrarsi/bank.sqlite``); ``use=False`` is a cold start that leaves it as it was."""

    url: str | None = None
    use: bool = True


APPLY_TOP_K = 3  # candidates Apply verifies unless told otherwise (``--top``)
APPLY_MIN_ROUNDS = 5  # Apply's rounds, whatever the Doctor recommends: at least
APPLY_MAX_ROUNDS = 10  # and at most


def apply_rounds(recommended: int | None) -> int:
    """Rounds Apply runs unless told otherwise: the Doctor's recommended repeats, within
    [``APPLY_MIN_ROUNDS``, ``APPLY_MAX_ROUNDS``] (here so the Doctor can say what those rounds
    detect without reaching into Apply)."""
    return min(APPLY_MAX_ROUNDS, max(APPLY_MIN_ROUNDS, recommended or APPLY_MIN_ROUNDS))


@dataclass(frozen=True, kw_only=True)
class OptimizeOptions:
    """Everything ``optimize`` runs with besides the workload and the instruction."""

    scale: str = "tiny"
    rounds: int = 1
    out_dir: Path = Path(".infrarsi") / "optimize"
    top_k: int = APPLY_TOP_K
    doctor_repeats: int = 3
    verify_rounds: int | None = None
    search: SearchOptions = field(default_factory=SearchOptions)
    executor: ExecutorOptions = field(default_factory=ExecutorOptions)
    proposer: ProposerOptions = field(default_factory=ProposerOptions)
    bank: BankOptions = field(default_factory=BankOptions)

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise InfraRSIError(f"rounds {self.rounds}: give 1 or more")
