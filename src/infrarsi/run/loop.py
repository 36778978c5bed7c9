"""The run loop: the searcher asks, an executor runs, the store keeps every trial, the models
refit — until the budget is spent or the searcher expects nothing more worth a trial.

A run lives in a run directory: ``run.json`` (its id and store URL) and, by default, the
SQLite store ``run.sqlite``. Killed at any point, it resumes with ``resume=True``: finished
trials are told to a fresh searcher in order, and a trial left ``running`` is marked
``interrupted`` and proposed again first.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from infrarsi.contract import Contract
from infrarsi.errors import InfraRSIError
from infrarsi.events import (
    EventSink,
    PatchesAsked,
    PatchesProposed,
    RunStarted,
    TrialEnded,
    TrialLaunched,
    ignore,
)
from infrarsi.executors import Executor, LocalExecutor, TrialRequest
from infrarsi.folder_lock import holding
from infrarsi.objective import steady_step_time_s
from infrarsi.options import Budget, SearchOptions
from infrarsi.proposal import (
    Proposer,
    Recorded,
    proposed_by,
    who_proposed,
)
from infrarsi.records import (
    BANK_ADVICE_FILE,
    DOCTOR_FILE,
    Prediction,
    RunResult,
    RunStart,
)
from infrarsi.run import searchers as registry
from infrarsi.run.handoff import proposal_state, ranking, run_result
from infrarsi.run.known import disagrees, doctor_baseline
from infrarsi.run.outcomes import config_from_json, config_json, outcome_of, outcome_of_stored
from infrarsi.run.problem import Outcome, Problem, SlowBound
from infrarsi.run.problem_build import build_problem, with_proposed
from infrarsi.run.screened import screened
from infrarsi.run.searcher_base import Searcher
from infrarsi.run.space import Config
from infrarsi.stages import Stage
from infrarsi.store import (
    Ledger,
    RunDirError,
    RunStatus,
    Store,
    StoredRun,
    StoredTrial,
    new_run_id,
    sqlite_url,
)
from infrarsi.trial import TrialRecord
from infrarsi.trial.spec import challenge_seed


class RunError(InfraRSIError):
    """A run that cannot start or resume, with the reason and the fix."""


@dataclass
class _Loop:
    """Where one search loop stands: the problem and the searcher (rebuilt when patches are
    proposed), configs queued before the searcher's (a requeued trial, a baseline measured
    again), the trials in flight by handle, and what was spent."""

    problem: Problem
    searcher: Searcher
    queue: list[tuple[Config, StoredTrial | None]]
    seq: int
    spent_s: float
    count: int
    t0: float
    reason: str = "budget spent"
    stopping: bool = False
    flying: dict[str, tuple[Config, int]] = field(default_factory=dict)  # handle: (config, row)

    @property
    def baseline(self) -> Config:
        return self.problem.baseline


class RunLoop:
    """One run of one searcher on one contract, recorded in a store."""

    def __init__(
        self,
        contract: Contract,
        run_dir: Path,
        options: SearchOptions | None = None,
        *,
        start: RunStart | None = None,
        executor: Executor | None = None,
        proposer: Proposer | None = None,
        on_event: EventSink | None = None,
        ledger: Ledger | None = None,
    ):
        """``options``: the searcher, its budget (resolved against the contract's), seed,
        trials in flight and store. ``start``: what the run starts from — the Doctor's report
        and the experience bank's advice (``bank.advice_for``), kept in the run directory so
        a resumed run searches with the same advice. ``proposer``: where code patches come
        from (``proposers``; None: the workload's catalog) — asked before the first trial and
        every ``PROPOSE_EVERY`` trials while it wants to; a patch it accepts joins the
        candidates and is tried on the baseline's knobs first. Trials in flight at once
        (``options.parallel``) need an executor with room for them (a cluster's nodes).
        ``ledger``: the round's store and run, opened by the composer, who subscribed its
        listeners to it — the audit among them (None: the run opens its own store,
        ``options.store_url``, heard by no one)."""
        options = options or SearchOptions()
        if options.searcher not in registry.SEARCHERS:
            raise RunError(
                f"searcher {options.searcher!r}: choose one of {', '.join(registry.SEARCHERS)}"
            )
        self.contract, self.run_dir = contract, Path(run_dir).resolve()
        self.options = options
        self.budget = options.budget.resolve(contract.budget)
        self.store_url = options.store_url or sqlite_url(self.run_dir)
        self.executor = executor or LocalExecutor(self.run_dir)
        self.begun = start or RunStart()
        self.doctor_report, self.bank_advice = self.begun.doctor_report, self.begun.bank_advice
        self.on_event: EventSink = on_event or ignore
        self.manifest = contract.manifest()
        self.proposer = proposer
        self.ledger = ledger
        self._proposed_at: int | None = None
        self._writers = proposed_by(self.run_dir)  # proposed patch id -> who wrote it
        # the seed every search trial runs at: drawn when the run starts, kept in run.json
        # (a trial sees its own folder only), never the contract's: a patch that replays a
        # stored result at the known seed ranks nowhere
        self.trial_seed: int | None = None
        self._known: list[Outcome] = []  # the Doctor's baseline runs, told to the searcher
        self._remeasuring = False  # the baseline is being measured again (an outlier)

    def _problem(self) -> Problem:
        proposed = self.proposer.accepted() if self.proposer else []
        catalog = self.proposer.searches_catalog if self.proposer else True
        manifest = with_proposed(self.manifest, proposed, self.run_dir, catalog)
        problem = build_problem(
            manifest,
            self.contract.scale,
            self.contract.mem_cap_bytes,
            self.doctor_report,
            self.contract.noise.min_detectable_effect,
            self.options.seed,
            bank=self.bank_advice,
            first=tuple(frozenset([p.patch_id]) for p in proposed),
        )
        problem.per_trial = self.budget.trials is not None  # else scored per expected second
        return problem

    def _searcher(self, store: Store, run_id: str) -> tuple[Problem, Searcher]:
        """The problem as it stands (with every patch proposed so far) and a searcher that
        has been told every finished trial of the run, in order."""
        problem = self._problem()
        searcher = registry.make(self.options.searcher, problem, self.options.seed)
        self._known = doctor_baseline(
            store.trials(run_id, Stage.DOCTOR),
            problem.baseline,
            problem.capacity_bytes,
            self.contract.objective,
        )
        for outcome in self._known:  # the Doctor's baseline runs: measured already, here
            searcher.tell(problem.baseline, outcome)
        for trial in store.trials(run_id):
            config = config_from_json(trial.config_json)
            if trial.status.is_finished() and config in problem.index:
                searcher.tell(
                    config,
                    outcome_of_stored(trial, problem.capacity_bytes, self.contract.objective),
                )
        return problem, searcher

    def _propose(self, store: Store, run_id: str, count: int, baseline: Config) -> bool:
        """Ask the proposer when it is due; True when the candidates changed (a patch was
        accepted, or the catalog came back because the proposer stopped)."""
        due = self._proposed_at is None or count - self._proposed_at >= PROPOSE_EVERY
        if self.proposer is None or not due or not self.proposer.wants_more():
            return False
        self._proposed_at = count
        catalog = self.proposer.searches_catalog
        self.on_event(PatchesAsked(proposer=self.proposer.name, trials=count))
        new = self.proposer.propose(
            proposal_state(store.trials(run_id), baseline),
            on_trial=lambda label, record: store.add_trial(
                run_id, Stage.PROPOSE, record, label=label
            ),
        )
        accepted = [p.patch_id for p in new]
        if accepted:
            self._writers = proposed_by(self.run_dir)
        self.on_event(PatchesProposed(proposer=self.proposer.name, accepted=accepted))
        return bool(new) or catalog != self.proposer.searches_catalog

    def start(self) -> RunResult:
        """A new run in ``run_dir`` (which must not hold one, nor another process run there)."""
        with holding(self.run_dir):
            return self._start()

    def _start(self) -> RunResult:
        if (self.run_dir / "run.json").exists():
            raise RunError(
                f"{self.run_dir} already holds a run: resume it with --resume "
                f"{self.run_dir}, or give another run directory"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        store = self.ledger.store if self.ledger else Store(self.store_url)
        run_id = self.ledger.run_id if self.ledger else self.begun.run_id or new_run_id()
        search = replace(self.options, budget=self.budget)
        store.save_run(  # a run opened before its Doctor gets its sealed contract here
            StoredRun.opened(run_id, self.contract, self.manifest.name, search, RunStatus.RUNNING)
        )
        self.ledger = Ledger(store, run_id)
        self.trial_seed = challenge_seed()
        (self.run_dir / "run.json").write_text(
            json.dumps(
                {"run_id": run_id, "store_url": store.url, TRIAL_SEED: self.trial_seed},
                indent=2,
            )
        )
        if self.doctor_report is not None:  # later stages read the baseline's diagnosis here
            self.doctor_report.save(self.run_dir / DOCTOR_FILE)
            store.add_finished(run_id, Stage.DOCTOR, self.doctor_report.trial_folders())
        if self.bank_advice is not None:
            self.bank_advice.save(self.run_dir / BANK_ADVICE_FILE)
        return self._loop(store, run_id, [])

    @classmethod
    def resume(
        cls,
        run_dir: Path,
        contract: Contract | None = None,
        *,
        parallel: int = 1,
        executor: Executor | None = None,
        proposer: Proposer | None = None,
        on_event: EventSink | None = None,
        ledger: Ledger | None = None,
    ) -> RunResult:
        """Continue the run in ``run_dir`` where it stopped: its searcher, budget, seed and
        store as stored, from the Doctor's report and the bank's advice kept beside it; the
        patches proposed before it stopped stay (``proposer`` None). ``ledger``: the run's
        handle, opened by the composer who subscribed its listeners (None: the store
        ``run_dir`` names, heard by no one). Refused while another process runs there."""
        with holding(Path(run_dir), create=False):
            return cls._resume(
                run_dir,
                contract,
                parallel=parallel,
                executor=executor,
                proposer=proposer,
                on_event=on_event,
                ledger=ledger,
            )

    @classmethod
    def _resume(
        cls,
        run_dir: Path,
        contract: Contract | None,
        *,
        parallel: int,
        executor: Executor | None,
        proposer: Proposer | None,
        on_event: EventSink | None,
        ledger: Ledger | None,
    ) -> RunResult:
        try:
            ledger = ledger or Ledger.of_run_dir(Path(run_dir))
        except RunDirError as exc:
            raise RunError(str(exc)) from None
        store, run = ledger.store, ledger.run
        stored = run.contract
        if contract is not None and contract.contract_hash != stored.contract_hash:
            raise RunError(
                f"the run was made for contract {stored.contract_hash[:12]}, not "
                f"{contract.contract_hash[:12]}: resume it without a contract, or "
                "start a new run"
            )
        options = SearchOptions(
            searcher=run.searcher,
            budget=Budget(trials=run.budget_trials, seconds=run.budget_s),
            seed=run.seed,
            parallel=parallel,
            store_url=store.connect_url,
        )
        loop = cls(
            stored,
            Path(run_dir),
            options,
            start=RunStart.kept_in(Path(run_dir)),
            executor=executor,
            proposer=proposer or Recorded(Path(run_dir)),
            on_event=on_event,
        )
        loop.trial_seed = json.loads((Path(run_dir) / "run.json").read_text()).get(TRIAL_SEED)
        requeue = store.interrupt_running(run.run_id)
        store.set_run_status(run.run_id, RunStatus.RUNNING)
        return loop._loop(store, run.run_id, requeue)

    # -- the loop --------------------------------------------------------------------------
    def _loop(self, store: Store, run_id: str, requeue: list[StoredTrial]) -> RunResult:
        """Propose, launch and tell until the budget is spent, the models expect no gain or
        nothing is left: up to ``parallel`` trials in flight, each told back as it ends."""
        problem, searcher = self._searcher(store, run_id)  # resumed: told what was measured
        finished = [t for t in store.trials(run_id) if t.status.is_finished()]
        st = _Loop(
            problem=problem,
            searcher=searcher,
            queue=[
                (config_from_json(t.config_json), t)
                for t in requeue
                if config_from_json(t.config_json) not in searcher.tried
            ],
            seq=max((t.seq for t in store.trials(run_id)), default=-1) + 1,
            spent_s=sum(t.cost_s or 0.0 for t in finished),
            count=len(finished),
            t0=time.monotonic(),
        )
        self.on_event(
            RunStarted(
                run_id=run_id,
                run_dir=str(self.run_dir),
                candidates=len(problem.candidates),
                resumed=len(finished),
                requeued=len(st.queue),
            )
        )
        while True:
            while not st.stopping and len(st.flying) < self.options.parallel:
                if not self._launch_next(store, run_id, st):
                    break
            if not st.flying:
                break
            self._finish_next(store, st)
        ranked = ranking(st.searcher, store.trials(run_id))
        store.set_ranking(run_id, ranked)
        store.set_run_status(run_id, RunStatus.FINISHED, st.reason)
        return run_result(
            self.run_dir,
            run_id,
            self.options.searcher,
            st.searcher,
            store.trials(run_id),
            (st.reason, len(requeue)),
            ranked,
        )

    def _launch_next(self, store: Store, run_id: str, st: _Loop) -> bool:
        """Fill one free slot: the next queued config, else the searcher's; False when none
        is launched now (the loop then stops, or waits for what is in flight)."""
        why = self._budget_spent(st.count + len(st.flying), st.spent_s, st.t0)
        if why:
            st.reason, st.stopping = why, True
            return False
        if not st.queue and not st.flying and self._propose(store, run_id, st.count, st.baseline):
            st.problem, st.searcher = self._searcher(store, run_id)
        config, again = st.queue.pop(0) if st.queue else (None, None)
        if config is None:
            left = self._trials_left(st.count, st.spent_s + time.monotonic() - st.t0)
            if st.searcher.should_stop(left) and st.count >= 3:
                st.reason = "the models expect no gain above the minimum detectable effect"
                st.stopping = True
                return False
            config = st.searcher.ask()
        if config is None:
            if not st.flying:
                st.reason, st.stopping = "every candidate was tried", True
            return False  # else: what is in flight may open more
        predictions = _predictions(st.searcher) if again is None else None
        if again is not None:
            store.restart_trial(again.id)
            row, this_seq = again.id, again.seq
        else:
            by = who_proposed(config.patches, self._writers, self.options.searcher)
            row = store.start_trial(run_id, st.seq, config_json(config), predictions, by)
            this_seq, st.seq = st.seq, st.seq + 1
        changes = config.describe_from(st.baseline)
        self.on_event(TrialLaunched(seq=this_seq, changes=changes, predicted=predictions))
        bound = st.searcher.slow_bound()
        st.flying[self._submit(config, bound)] = (config, row)
        st.searcher.tried.add(config)  # in flight: not proposed again meanwhile
        return True

    def _finish_next(self, store: Store, st: _Loop) -> None:
        """Wait for the next trial in flight to end; screen, store and tell it."""
        handle, record = self._next_done(st.flying)
        config, row = st.flying.pop(handle)
        record = screened(
            record,
            self.contract,
            self.manifest,
            st.baseline.knob_dict,
            self.doctor_report.timing if self.doctor_report else None,
        )
        outcome = outcome_of(record, st.problem.capacity_bytes, self.contract.objective)
        ended = store.finish_trial(
            row,
            outcome.status,
            trial_id=record.trial_id,
            step_time_s=steady_step_time_s(record) if outcome.status.is_ok() else None,
            peak_mem_bytes=outcome.peak_bytes,
            cost_s=record.cost_s,
            error=record.error,
            record=record,
        )
        st.searcher.tell(config, outcome)
        st.count, st.spent_s = st.count + 1, st.spent_s + record.cost_s
        if self._measure_again(config, outcome, st.problem):
            st.queue.insert(0, (st.baseline, None))  # before the searcher decides more
        best = st.searcher.recommend()
        self.on_event(
            TrialEnded(
                trial=ended,
                changes=config.describe_from(st.baseline),
                ranked_time_per_step_s=outcome.step_time_s,
                best=None if best is None else best.describe_from(st.baseline),
            )
        )

    def _measure_again(self, config: Config, outcome: Outcome, problem: Problem) -> bool:
        """Whether a search measurement of the baseline disagrees with the Doctor's runs by
        more than the noise allows (``known.disagrees``) and is to be measured once more
        before the searcher proposes anything else; a second disagreeing one stands (the
        load changed: the drift correction takes it from there)."""
        if config != problem.baseline or not self._known:
            return False
        again = not self._remeasuring and disagrees(outcome, self._known, problem.noise_var_log)
        self._remeasuring = again
        return again

    def _trials_left(self, count: int, spent_s: float) -> int | None:
        """Trials the budget still allows: by count, or by seconds at the mean cost so far."""
        trials, seconds = self.budget.trials, self.budget.seconds
        left = [trials - count] if trials is not None else []
        if seconds is not None and count:
            left.append(int((seconds - spent_s) / max(spent_s / count, 1e-3)))
        return max(1, min(left)) if left else None

    def _budget_spent(self, committed: int, spent_s: float, t0: float) -> str | None:
        """Why no further trial may start (``committed``: finished and in flight), or None."""
        if self.budget.trials is not None and committed >= self.budget.trials:
            return "budget spent"
        seconds = self.budget.seconds
        if seconds is not None and spent_s + (time.monotonic() - t0) >= seconds:
            return "time budget spent"
        return None

    def _submit(self, config: Config, bound: SlowBound | None = None) -> str:
        """One trial to the executor; cut short past ``bound`` (recorded ``slow``)."""
        return self.executor.submit(
            TrialRequest.of(
                self.contract,
                config,
                slow_after_s=bound.after_s if bound else None,
                censored_step_time_s=bound.censored_step_time_s if bound else None,
                seed=self.trial_seed,
            )
        )

    def _next_done(self, flying: dict[str, Any]) -> tuple[str, TrialRecord]:
        """The first in-flight trial to end, and its record (one in flight: wait for it)."""
        if len(flying) == 1:
            handle = next(iter(flying))
            return handle, self.executor.wait(handle)
        while True:
            for handle in flying:
                record = self.executor.poll(handle)
                if record is not None:
                    return handle, record
            time.sleep(POLL_S)


TRIAL_SEED = "trial_seed"  # run.json's field: the search trials' seed
POLL_S = 0.2  # how often trials in flight are polled
PROPOSE_EVERY = 2  # trials between two requests to a proposer (a patch is tried in between)


def _predictions(searcher: Searcher) -> Prediction | None:
    """The models' predictions for the config the searcher just proposed (None for a searcher
    without models, or before any trial)."""
    last = getattr(searcher, "last", None)
    return last if isinstance(last, Prediction) else None
