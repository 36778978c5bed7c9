"""What a run is given and how its search is set up: the ``RunSetup`` fixed while it runs, the
search problem as it stands, a searcher told what the run measured, and the proposer's turn.
The loop that drives them is ``run/loop.py``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infrarsi.contract import Contract
from infrarsi.errors import InfraRSIError
from infrarsi.events import EventSink, PatchesAsked, PatchesProposed, ignore
from infrarsi.executors import Executor, LocalExecutor
from infrarsi.options import Budget, SearchOptions
from infrarsi.proposal import Proposer, proposed_by
from infrarsi.records import DoctorReport, RunStart
from infrarsi.run import searchers as registry
from infrarsi.run.handoff import proposal_state
from infrarsi.run.known import doctor_baseline
from infrarsi.run.outcomes import config_from_json, outcome_of_stored
from infrarsi.run.problem import Outcome, Problem
from infrarsi.run.problem_build import build_problem, with_proposed
from infrarsi.run.searcher_base import Searcher
from infrarsi.run.space import Config
from infrarsi.stages import Stage
from infrarsi.store import Store, sqlite_url
from infrarsi.workloads.manifest import Manifest

PROPOSE_EVERY = 2  # trials between two requests to a proposer (a patch is tried in between)


class RunError(InfraRSIError):
    """A run that cannot start or resume, with the reason and the fix."""


@dataclass(frozen=True)
class RunSetup:
    """What one run of one searcher on one contract is given, fixed while it runs: the
    searcher's options with the budget resolved against the contract's, where its trials
    run, what it starts from (the Doctor's report and the bank's advice, kept in the run
    directory so a resumed run searches with the same), where code patches come from (None:
    the workload's catalog) and who hears its events. ``trial_seed``: the seed every search
    trial runs at — drawn when the run starts, kept in ``run.json`` (a trial sees its own
    folder only), never the contract's: a patch that replays a stored result at the known
    seed ranks nowhere."""

    contract: Contract
    run_dir: Path
    options: SearchOptions
    budget: Budget
    executor: Executor
    begun: RunStart
    proposer: Proposer | None
    on_event: EventSink
    manifest: Manifest
    trial_seed: int | None = None

    @classmethod
    def of(
        cls,
        contract: Contract,
        run_dir: Path,
        options: SearchOptions | None = None,
        *,
        start: RunStart | None = None,
        executor: Executor | None = None,
        proposer: Proposer | None = None,
        on_event: EventSink | None = None,
    ) -> RunSetup:
        """``options``: the searcher, its budget, seed, trials in flight and store. A
        ``proposer`` is asked before the first trial and every ``PROPOSE_EVERY`` trials while
        it wants to; a patch it accepts joins the candidates and is tried on the baseline's
        knobs first. Trials in flight at once (``options.parallel``) need an executor with
        room for them (a cluster's nodes)."""
        options = options or SearchOptions()
        if options.searcher not in registry.SEARCHERS:
            raise RunError(
                f"searcher {options.searcher!r}: choose one of {', '.join(registry.SEARCHERS)}"
            )
        run_dir = Path(run_dir).resolve()
        return cls(
            contract,
            run_dir,
            options,
            options.budget.resolve(contract.budget),
            executor or LocalExecutor(run_dir),
            start or RunStart(),
            proposer,
            on_event or ignore,
            contract.manifest(),
        )

    @property
    def doctor_report(self) -> DoctorReport | None:
        return self.begun.doctor_report

    @property
    def store_url(self) -> str:
        return self.options.store_url or sqlite_url(self.run_dir)


@dataclass
class Asking:
    """Where the run stands with its proposer: when it was last asked (trials finished then)
    and who wrote each patch proposed so far (patch id -> proposer)."""

    writers: dict[str, str]
    asked_at: int | None = None


def problem_of(setup: RunSetup) -> Problem:
    """The search problem as it stands: the catalog's patches (unless the proposer leaves
    the catalog out) and every patch proposed so far, tried first on the baseline's knobs."""
    proposer = setup.proposer
    proposed = proposer.accepted() if proposer else []
    catalog = proposer.searches_catalog if proposer else True
    manifest = with_proposed(setup.manifest, proposed, setup.run_dir, catalog)
    problem = build_problem(
        manifest,
        setup.contract.scale,
        setup.contract.mem_cap_bytes,
        setup.doctor_report,
        setup.contract.noise.min_detectable_effect,
        setup.options.seed,
        bank=setup.begun.bank_advice,
        first=tuple(frozenset([p.patch_id]) for p in proposed),
    )
    problem.per_trial = setup.budget.trials is not None  # else scored per expected second
    return problem


def told_searcher(
    setup: RunSetup, store: Store, run_id: str
) -> tuple[Problem, Searcher, list[Outcome]]:
    """The problem as it stands, a searcher that has been told every finished trial of the
    run in order, and the Doctor's baseline runs it was told first (measured already)."""
    problem = problem_of(setup)
    searcher = registry.make(setup.options.searcher, problem, setup.options.seed)
    known = doctor_baseline(
        store.trials(run_id, Stage.DOCTOR),
        problem.baseline,
        problem.capacity_bytes,
        setup.contract.objective,
    )
    for outcome in known:
        searcher.tell(problem.baseline, outcome)
    for trial in store.trials(run_id):
        config = config_from_json(trial.config_json)
        if trial.status.is_finished() and config in problem.index:
            searcher.tell(
                config, outcome_of_stored(trial, problem.capacity_bytes, setup.contract.objective)
            )
    return problem, searcher, known


def ask_proposer(
    setup: RunSetup, asking: Asking, store: Store, run_id: str, count: int, baseline: Config
) -> bool:
    """Ask the proposer when it is due; True when the candidates changed (a patch was
    accepted, or the catalog came back because the proposer stopped)."""
    proposer = setup.proposer
    due = asking.asked_at is None or count - asking.asked_at >= PROPOSE_EVERY
    if proposer is None or not due or not proposer.wants_more():
        return False
    asking.asked_at = count
    catalog = proposer.searches_catalog
    setup.on_event(PatchesAsked(proposer=proposer.name, trials=count))
    new = proposer.propose(
        proposal_state(store.trials(run_id), baseline),
        on_trial=lambda label, record: store.add_trial(run_id, Stage.PROPOSE, record, label=label),
    )
    accepted = [p.patch_id for p in new]
    if accepted:
        asking.writers = proposed_by(setup.run_dir)
    setup.on_event(PatchesProposed(proposer=proposer.name, accepted=accepted))
    return bool(new) or catalog != proposer.searches_catalog
