"""What the search already knows before its first trial: the Doctor's baseline runs (same
contract, same host, minutes earlier) count as measurements of the baseline, and a search
measurement of the baseline that disagrees with them by more than the noise allows is measured
again before it decides anything (one outlier taken as the baseline made every config look
1.6x faster in a search than Apply then measured)."""

from __future__ import annotations

import math

from infrarsi.records import DOCTOR_BASELINE_LABEL
from infrarsi.records.trial import TrialStatus
from infrarsi.run.outcomes import config_from_json, outcome_of
from infrarsi.run.problem import Outcome
from infrarsi.run.space import Config
from infrarsi.store import StoredTrial

OUTLIER_Z = 3.0  # standard deviations of the between-run noise (a priori, on no table)
OUTLIER_MIN_LOG = math.log(1.05)  # and at least 5%, whatever the noise estimate says


def doctor_baseline(
    doctor_trials: list[StoredTrial], baseline: Config, capacity: float | None, objective: str
) -> list[Outcome]:
    """The Doctor's baseline runs that ended ok, as the search's outcomes of its baseline (in
    the order they ran); none when the Doctor ran other knobs than the search's baseline."""
    out = []
    for trial in doctor_trials:
        if not (trial.label or "").startswith(DOCTOR_BASELINE_LABEL):
            continue
        if trial.status is not TrialStatus.OK or trial.record is None:
            continue
        if config_from_json(trial.config_json) != baseline:
            continue
        out.append(outcome_of(trial.record, capacity, objective))
    return [o for o in out if o.status is TrialStatus.OK]


def disagrees(outcome: Outcome, known: list[Outcome], noise_var_log: float) -> bool:
    """Whether an ok measurement of the baseline lies further from the mean of the known ones
    (log time) than ``OUTLIER_Z`` between-run standard deviations of that difference — and
    ``OUTLIER_MIN_LOG`` at least. False without known measurements."""
    times = [o.time_s for o in known if o.status is TrialStatus.OK]
    if not times or outcome.status is not TrialStatus.OK:
        return False
    mean = sum(math.log(t) for t in times) / len(times)
    sd = math.sqrt(max(noise_var_log, 0.0) * (1.0 + 1.0 / len(times)))
    return abs(math.log(outcome.time_s) - mean) > max(OUTLIER_Z * sd, OUTLIER_MIN_LOG)
