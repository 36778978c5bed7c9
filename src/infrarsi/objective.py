"""The time a contract's objective compares, read from a trial record — one definition that the
search (which ranks on it) and Apply (which verifies on it) share, so the search never ranks on a
quantity Apply will not confirm.

- ``e2e_time``: the training's time over every step, warm-up and compile included
  (``train_time_s``): a config whose compile costs more than its faster steps save at the
  contract's scale is slower, whatever its steady step time.
- ``tokens_per_s``: the steady step time by the harness's clock (``harness_step_time_s``, the
  trial's own ``step_time_s`` where the harness has none).
"""

from __future__ import annotations

from infrarsi.trial import TrialRecord


def compared_time(record: TrialRecord, objective: str) -> float | None:
    """The time compared for ``objective``; None for a trial that did not end ``ok``."""
    m = record.metrics
    if record.status.value != "ok" or m is None:
        return None
    if objective == "e2e_time":
        return m.train_time_s
    return steady_step_time_s(record)


def compared_name(objective: str) -> str:
    """The name of what ``compared_time`` returns for an objective."""
    return "train_time_s" if objective == "e2e_time" else "harness_step_time_s"


def steady_step_time_s(record: TrialRecord) -> float | None:
    """The steady step time: the harness's clock when it has one."""
    m = record.metrics
    if m is None:
        return None
    return m.harness_step_time_s or m.step_time_s


def ranked_step_time_s(record: TrialRecord, objective: str) -> float | None:
    """The objective's time per step, what the search ranks configs by: for ``e2e_time`` the
    training time spread over its steps (so compile and warm-up count), else the steady step."""
    compared = compared_time(record, objective)  # None unless the trial ran ok with metrics
    if compared is not None and objective == "e2e_time" and record.metrics.steps:
        return compared / record.metrics.steps
    return compared
