"""The search ranks configs on the time the contract's objective compares (what Apply will
verify): for an end-to-end objective compile and warm-up count, for throughput they do not."""

from infrarsi.objective import compared_name, compared_time, ranked_step_time_s
from infrarsi.records.trial import Evaluation
from infrarsi.run.outcomes import outcome_of
from infrarsi.trial import TrialRecord


def _record(
    step_s: float, compile_s: float, steps: int = 10, warmup: int = 2, status: str = "ok"
) -> TrialRecord:
    train = step_s * steps + compile_s
    metrics = {
        "step_time_s": step_s,
        "step_time_cv": 0.02,
        "e2e_time_s": train + 3.0,
        "train_time_s": train,
        "startup_time_s": 3.0,
        "warmup_overhead_s": compile_s,
        "compile_time_s": compile_s,
        "tokens_per_step": 512,
        "tokens_per_s": 512 / step_s,
        "peak_mem_bytes": [100 << 20],
        "harness_step_time_s": step_s,
        "loss": [1.0],
        "step_times_s": [step_s] * steps,
        "steps": steps,
        "warmup_steps": warmup,
        "ranks": 1,
    }
    return TrialRecord.model_validate(
        {
            "trial_id": "t",
            "workload": "w",
            "scale": "tiny",
            "status": status,
            "knobs": {},
            "patches": [],
            "locked_files": {},
            "mem_cap_bytes": None,
            "timeout_s": 60.0,
            "started_unix_s": 0.0,
            "cost_s": train + 5.0,
            "metrics": metrics if status == "ok" else None,
        }
    )


def test_e2e_objective_charges_compile_to_every_step():
    plain, compiled = _record(0.10, 0.0), _record(0.05, 30.0)
    # per steady step the compiled config is twice as fast; over the training it is 30x slower
    assert ranked_step_time_s(compiled, "tokens_per_s") < ranked_step_time_s(plain, "tokens_per_s")
    assert ranked_step_time_s(compiled, "e2e_time") > ranked_step_time_s(plain, "e2e_time")
    assert ranked_step_time_s(compiled, "e2e_time") == (0.05 * 10 + 30.0 + 3.0) / 10
    assert compared_time(compiled, "e2e_time") == 0.05 * 10 + 30.0 + 3.0
    assert compared_name("e2e_time") == "e2e_time_s"


def test_e2e_objective_charges_what_the_harness_saw_not_what_the_workload_reports():
    """Work moved before the first step line, after the last one, or into the patch's own
    mapping of its parameters is charged: the compared time is the harness's launch-to-exit
    wall time plus that mapping, whatever the reported steps add up to."""
    honest, hidden = _record(0.10, 0.0), _record(0.01, 0.0)
    hidden = hidden.model_copy(
        update={
            "metrics": hidden.metrics.model_copy(
                update={"e2e_time_s": honest.metrics.e2e_time_s + 0.2}
            )
        }
    )
    assert compared_time(hidden, "e2e_time") > compared_time(honest, "e2e_time")
    remapped = honest.model_copy(update={"evaluation": Evaluation(remap_s=5.0)})
    assert compared_time(remapped, "e2e_time") == compared_time(honest, "e2e_time") + 5.0


def test_the_searcher_sees_the_objective_and_failures_carry_no_time():
    compiled = _record(0.05, 30.0)
    assert (
        outcome_of(compiled, None, "e2e_time").ranked_time_per_step_s
        == (0.05 * 10 + 30.0 + 3.0) / 10
    )
    assert outcome_of(compiled, None, "tokens_per_s").ranked_time_per_step_s == 0.05
    crashed = _record(0.05, 0.0, status="crash")
    assert compared_time(crashed, "e2e_time") is None
    assert outcome_of(crashed, None, "e2e_time").ranked_time_per_step_s is None
