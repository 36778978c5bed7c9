"""The time a contract's objective compares, read from a trial record — one definition that the
search (which ranks on it) and Apply share.

Both come from the harness's own clock, never from the times the workload reports:

- ``e2e_time``: what the user pays, launch to exit by the harness's clock (``e2e_time_s``:
  start-up, compile, every step and the tail), plus the seconds the patch's own mapping of its
  parameters to the reference layout took afterwards (``Evaluation.remap_s``): work moved
  before the first step line, after the last, or into that mapping is charged all the same.
- ``tokens_per_s``: the steady step time by the arrival of the step lines
  (``harness_step_time_s``, the trial's own ``step_time_s`` where the harness has none). For a
  config without a patch that is the workload's own code writing them, and it is what Apply
  compares; a patch's lines are the patch's to shape, so the search ranks a patched trial on
  the larger of them and its window charged against the Doctor's baseline (``run.screened``:
  a hint) and Apply compares a patched candidate by the window the kernel bounds against the
  same knobs without the patch (``verify.clock``, ``apply.rounds.harness_time``), under the
  same name.
"""

from __future__ import annotations

from infrarsi.records.trial import TrialStatus
from infrarsi.trial import TrialRecord


def compared_time(record: TrialRecord, objective: str) -> float | None:
    """The time compared for ``objective``; None for a trial that did not end ``ok``."""
    m = record.metrics
    if record.status.value != TrialStatus.OK or m is None:
        return None
    if objective == "e2e_time":
        return m.e2e_time_s + (record.evaluation.remap_s if record.evaluation else 0.0)
    return steady_step_time_s(record)


def compared_name(objective: str) -> str:
    """The name of what ``compared_time`` returns for an objective."""
    return "e2e_time_s" if objective == "e2e_time" else "harness_step_time_s"


def steady_step_time_s(record: TrialRecord) -> float | None:
    """The steady step time: the harness's clock when it has one — for a patched search trial
    the larger of its lines' step and the step its window was charged (``run.screened``: its
    lines are its own to shape)."""
    m = record.metrics
    if m is None:
        return None
    lines = m.harness_step_time_s or m.step_time_s
    return max(lines, record.window_step_time_s or 0.0)


def ranked_step_time_s(record: TrialRecord, objective: str) -> float | None:
    """The objective's time per step, what the search ranks configs by: for ``e2e_time`` the
    whole run spread over its steps (so start-up, compile and warm-up count), else the steady
    step."""
    compared = compared_time(record, objective)  # None unless the trial ran ok with metrics
    if compared is not None and objective == "e2e_time" and record.measured.steps:
        return compared / record.measured.steps
    return compared
