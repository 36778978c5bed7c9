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
from infrarsi.events import (
    EventSink,
    RunStarted,
    TrialEnded,
    TrialLaunched,
)
from infrarsi.executors import Executor, TrialRequest
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
from infrarsi.run.handoff import ranking, run_result
from infrarsi.run.known import disagrees
from infrarsi.run.outcomes import config_from_json, config_json, outcome_of
from infrarsi.run.problem import Outcome, Problem, SlowBound
from infrarsi.run.screened import screened
from infrarsi.run.searcher_base import Searcher
from infrarsi.run.setup import (
    Asking,
    RunError,
    RunSetup,
    ask_proposer,
    told_searcher,
)
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
)
from infrarsi.trial import TrialRecord
from infrarsi.trial.spec import challenge_seed


@dataclass
class _Loop:
    """Where one search loop stands: the problem and the searcher (rebuilt when patches are
    proposed), the Doctor's baseline runs told to it, configs queued before the searcher's (a
    requeued trial, a baseline measured again), the trials in flight by handle, what was
    spent, and the proposer's state."""

    problem: Problem
    searcher: Searcher
    known: list[Outcome]
    queue: list[tuple[Config, StoredTrial | None]]
    seq: int
    spent_s: float
    count: int
    t0: float
    asking: Asking
    reason: str = "budget spent"
    stopping: bool = False
    remeasuring: bool = False  # the baseline is being measured again (an outlier)
    flying: dict[str, tuple[Config, int]] = field(default_factory=dict)  # handle: (config, row)

    @property
    def baseline(self) -> Config:
        return self.problem.baseline


# -- starting and resuming -------------------------------------------------------------------
def start_run(setup: RunSetup, ledger: Ledger | None = None) -> RunResult:
    """A new run in ``setup.run_dir`` (which must not hold one, nor another process run
    there), in ``ledger`` (None: the store ``setup.options`` names, heard by no one)."""
    with holding(setup.run_dir):
        return _started(setup, ledger)


def _started(setup: RunSetup, ledger: Ledger | None) -> RunResult:
    run_dir = setup.run_dir
    if (run_dir / "run.json").exists():
        raise RunError(
            f"{run_dir} already holds a run: resume it with --resume {run_dir}, or give "
            "another run directory"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    store = ledger.store if ledger else Store(setup.store_url)
    run_id = ledger.run_id if ledger else setup.begun.run_id or new_run_id()
    search_options = replace(setup.options, budget=setup.budget)
    store.save_run(  # a run opened before its Doctor gets its sealed contract here
        StoredRun.opened(
            run_id, setup.contract, setup.manifest.name, search_options, RunStatus.RUNNING
        )
    )
    setup = replace(setup, trial_seed=challenge_seed())
    (run_dir / "run.json").write_text(
        json.dumps(
            {"run_id": run_id, "store_url": store.url, TRIAL_SEED: setup.trial_seed}, indent=2
        )
    )
    report, advice = setup.begun.doctor_report, setup.begun.bank_advice
    if report is not None:  # later stages read the baseline's diagnosis here
        report.save(run_dir / DOCTOR_FILE)
        store.add_finished(run_id, Stage.DOCTOR, report.trial_folders())
    if advice is not None:
        advice.save(run_dir / BANK_ADVICE_FILE)
    return search(setup, store, run_id, [])


def resume_run(
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
        setup = RunSetup.of(
            stored,
            Path(run_dir),
            options,
            start=RunStart.kept_in(Path(run_dir)),
            executor=executor,
            proposer=proposer or Recorded(Path(run_dir)),
            on_event=on_event,
        )
        seed = json.loads((Path(run_dir) / "run.json").read_text()).get(TRIAL_SEED)
        requeue = store.interrupt_running(run.run_id)
        store.set_run_status(run.run_id, RunStatus.RUNNING)
        return search(replace(setup, trial_seed=seed), store, run.run_id, requeue)


class RunLoop:
    """The Run stage's handle, as the composer builds it: a ``RunSetup`` (``RunSetup.of``) and
    the round's ledger, to be started (``start_run``; a stopped run: ``resume_run``)."""

    def __init__(self, setup: RunSetup, ledger: Ledger | None = None):
        """``ledger``: the round's store and run, opened by the composer, who subscribed its
        listeners to it — the audit among them (None: the run opens its own store,
        ``setup.options.store_url``, heard by no one)."""
        self.setup, self.ledger = setup, ledger

    def start(self) -> RunResult:
        """A new run in ``run_dir`` (which must not hold one, nor another process run there)."""
        return start_run(self.setup, self.ledger)


# -- the loop ----------------------------------------------------------------------------------
def search(setup: RunSetup, store: Store, run_id: str, requeue: list[StoredTrial]) -> RunResult:
    """Propose, launch and tell until the budget is spent, the models expect no gain or
    nothing is left: up to ``parallel`` trials in flight, each told back as it ends."""
    problem, searcher, known = told_searcher(setup, store, run_id)  # resumed: told what ran
    finished = [t for t in store.trials(run_id) if t.status.is_finished()]
    st = _Loop(
        problem=problem,
        searcher=searcher,
        known=known,
        queue=[
            (config_from_json(t.config_json), t)
            for t in requeue
            if config_from_json(t.config_json) not in searcher.tried
        ],
        seq=max((t.seq for t in store.trials(run_id)), default=-1) + 1,
        spent_s=sum(t.cost_s or 0.0 for t in finished),
        count=len(finished),
        t0=time.monotonic(),
        asking=Asking(writers=proposed_by(setup.run_dir)),
    )
    setup.on_event(
        RunStarted(
            run_id=run_id,
            run_dir=str(setup.run_dir),
            candidates=len(problem.candidates),
            resumed=len(finished),
            requeued=len(st.queue),
        )
    )
    while True:
        while not st.stopping and len(st.flying) < setup.options.parallel:
            if not _launch_next(setup, store, run_id, st):
                break
        if not st.flying:
            break
        _finish_next(setup, store, st)
    ranked = ranking(st.searcher, store.trials(run_id))
    store.set_ranking(run_id, ranked)
    store.set_run_status(run_id, RunStatus.FINISHED, st.reason)
    return run_result(
        setup.run_dir,
        run_id,
        setup.options.searcher,
        st.searcher,
        store.trials(run_id),
        (st.reason, len(requeue)),
        ranked,
    )


def _launch_next(setup: RunSetup, store: Store, run_id: str, st: _Loop) -> bool:
    """Fill one free slot: the next queued config, else the searcher's; False when none
    is launched now (the loop then stops, or waits for what is in flight)."""
    why = _budget_spent(setup.budget, st.count + len(st.flying), st.spent_s, st.t0)
    if why:
        st.reason, st.stopping = why, True
        return False
    if (
        not st.queue
        and not st.flying
        and ask_proposer(setup, st.asking, store, run_id, st.count, st.baseline)
    ):
        st.problem, st.searcher, st.known = told_searcher(setup, store, run_id)
    config, again = st.queue.pop(0) if st.queue else (None, None)
    if config is None:
        left = _trials_left(setup.budget, st.count, st.spent_s + time.monotonic() - st.t0)
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
        by = who_proposed(config.patches, st.asking.writers, setup.options.searcher)
        row = store.start_trial(run_id, st.seq, config_json(config), predictions, by)
        this_seq, st.seq = st.seq, st.seq + 1
    changes = config.describe_from(st.baseline)
    setup.on_event(TrialLaunched(seq=this_seq, changes=changes, predicted=predictions))
    bound = st.searcher.slow_bound()
    st.flying[_submit(setup, config, bound)] = (config, row)
    st.searcher.tried.add(config)  # in flight: not proposed again meanwhile
    return True


def _finish_next(setup: RunSetup, store: Store, st: _Loop) -> None:
    """Wait for the next trial in flight to end; screen, store and tell it."""
    handle, record = _next_done(setup.executor, st.flying)
    config, row = st.flying.pop(handle)
    report = setup.doctor_report
    record = screened(
        record,
        setup.contract,
        setup.manifest,
        st.baseline.knob_dict,
        report.timing if report else None,
    )
    outcome = outcome_of(record, st.problem.capacity_bytes, setup.contract.objective)
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
    if _measure_again(st, config, outcome):
        st.queue.insert(0, (st.baseline, None))  # before the searcher decides more
    best = st.searcher.recommend()
    setup.on_event(
        TrialEnded(
            trial=ended,
            changes=config.describe_from(st.baseline),
            ranked_time_per_step_s=outcome.ranked_time_per_step_s,
            best=None if best is None else best.describe_from(st.baseline),
        )
    )


def _measure_again(st: _Loop, config: Config, outcome: Outcome) -> bool:
    """Whether a search measurement of the baseline disagrees with the Doctor's runs by
    more than the noise allows (``known.disagrees``) and is to be measured once more
    before the searcher proposes anything else; a second disagreeing one stands (the
    load changed: the drift correction takes it from there)."""
    if config != st.problem.baseline or not st.known:
        return False
    again = not st.remeasuring and disagrees(outcome, st.known, st.problem.noise_var_log)
    st.remeasuring = again
    return again


def _trials_left(budget: Budget, count: int, spent_s: float) -> int | None:
    """Trials the budget still allows: by count, or by seconds at the mean cost so far."""
    trials, seconds = budget.trials, budget.seconds
    left = [trials - count] if trials is not None else []
    if seconds is not None and count:
        left.append(int((seconds - spent_s) / max(spent_s / count, 1e-3)))
    return max(1, min(left)) if left else None


def _budget_spent(budget: Budget, committed: int, spent_s: float, t0: float) -> str | None:
    """Why no further trial may start (``committed``: finished and in flight), or None."""
    if budget.trials is not None and committed >= budget.trials:
        return "budget spent"
    seconds = budget.seconds
    if seconds is not None and spent_s + (time.monotonic() - t0) >= seconds:
        return "time budget spent"
    return None


def _submit(setup: RunSetup, config: Config, bound: SlowBound | None = None) -> str:
    """One trial to the executor; cut short past ``bound`` (recorded ``slow``)."""
    return setup.executor.submit(
        TrialRequest.of(
            setup.contract,
            config,
            slow_after_s=bound.after_s if bound else None,
            censored_step_time_s=bound.censored_step_time_s if bound else None,
            seed=setup.trial_seed,
        )
    )


def _next_done(executor: Executor, flying: dict[str, Any]) -> tuple[str, TrialRecord]:
    """The first in-flight trial to end, and its record (one in flight: wait for it)."""
    if len(flying) == 1:
        handle = next(iter(flying))
        return handle, executor.wait(handle)
    while True:
        for handle in flying:
            record = executor.poll(handle)
            if record is not None:
                return handle, record
        time.sleep(POLL_S)


TRIAL_SEED = "trial_seed"  # run.json's field: the search trials' seed
POLL_S = 0.2  # how often trials in flight are polled


def _predictions(searcher: Searcher) -> Prediction | None:
    """The models' predictions for the config the searcher just proposed (None for a searcher
    without models, or before any trial)."""
    last = getattr(searcher, "last", None)
    return last if isinstance(last, Prediction) else None
