"""What the search knows before its first trial: the Doctor's baseline runs, read from the store
as measurements of the search's baseline, and the rule that has the search measure its baseline
again when one measurement disagrees with them by more than the noise allows."""

import math

from test_objective import _record

from infrarsi.records import DOCTOR_BASELINE_LABEL
from infrarsi.run.known import OUTLIER_MIN_LOG, disagrees, doctor_baseline
from infrarsi.run.problem import Outcome
from infrarsi.run.space import Config
from infrarsi.stages import Stage
from infrarsi.store import (
    RunStatus,
    Store,
    StoredRun,
)


def _ok(step_s: float) -> Outcome:
    return Outcome("ok", ranked_time_per_step_s=step_s)


def test_a_measurement_far_outside_the_doctors_runs_disagrees():
    known = [_ok(4.3), _ok(4.4), _ok(4.35)]
    noise = math.log1p(0.03**2)  # 3% between runs
    assert disagrees(_ok(6.6), known, noise)  # the nanoGPT outlier: 50% slower
    assert not disagrees(_ok(4.5), known, noise)
    assert disagrees(_ok(3.4), known, noise)  # both ways
    assert not disagrees(_ok(6.6), [], noise)  # nothing known: nothing to disagree with
    assert not disagrees(Outcome("oom", cap_bytes=1.0), known, noise)
    # a noise estimate of zero still leaves the minimum: 4% off is not an outlier
    assert not disagrees(_ok(4.35 * math.exp(OUTLIER_MIN_LOG) * 0.99), [_ok(4.35)], 0.0)


def _store_with(records: list[tuple[str, dict, str]]) -> tuple[Store, str]:
    store = Store("sqlite://")
    store.create_run(
        StoredRun(
            run_id="r",
            created_unix_s=0.0,
            workload="w",
            scale="tiny",
            contract_hash="h",
            contract_json={},
            searcher="infrarsi",
            seed=0,
            budget_trials=3,
            budget_s=None,
            capacity_bytes=None,
            status=RunStatus.RUNNING,
        )
    )
    for i, (label, knobs, status) in enumerate(records):
        record = _record(0.1 + 0.01 * i, 0.0, status=status).model_copy(
            update={"trial_id": f"t{i}", "knobs": knobs}
        )
        store.add_trial("r", Stage.DOCTOR, record, label=label)
    return store, "r"


def test_the_doctors_ok_baseline_runs_of_the_same_knobs_are_the_search_baselines():
    base = {"micro_batch": 2, "nproc": 1}
    store, run = _store_with(
        [
            (f"{DOCTOR_BASELINE_LABEL} 1/3", base, "ok"),
            (f"{DOCTOR_BASELINE_LABEL} 2/3", base, "ok"),
            (f"{DOCTOR_BASELINE_LABEL} 3/3", base, "crash"),
            ("profiled run", base, "ok"),
            (f"{DOCTOR_BASELINE_LABEL} 1/1", {"micro_batch": 4, "nproc": 1}, "ok"),
        ]
    )
    known = doctor_baseline(store.trials(run, Stage.DOCTOR), Config.of(base), None, "tokens_per_s")
    assert [round(o.time_s, 3) for o in known] == [0.1, 0.11]
    assert doctor_baseline(store.trials(run, Stage.DOCTOR), Config.of({"x": 1}), None, "e2e") == []
