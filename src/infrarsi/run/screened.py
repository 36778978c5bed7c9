"""A search trial's arrivals, screened before the searcher is told: under a throughput objective
the search ranks a patched config on its lines' arrivals (cheap, a hint: Apply promotes on the
harness's clock alone), so lines that cannot be real would rank a cheat first and take one of
Apply's slots. A patched config's trial whose arrivals the Doctor's baseline contradicts
(``verify.clock.moved_work``) is recorded ``invalid`` with the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infrarsi.contract import Contract
from infrarsi.identity import same_config
from infrarsi.trial import TrialRecord
from infrarsi.trial.arrivals import Timing
from infrarsi.trial.record import TrialStatus
from infrarsi.verify.clock import moved_work
from infrarsi.workloads import Manifest


def screened(
    record: TrialRecord,
    contract: Contract,
    manifest: Manifest,
    baseline_knobs: dict[str, Any],
    timing: Timing | None,
) -> TrialRecord:
    """``record``, or (its arrivals refused) the same trial ``invalid`` with why, saved with
    its folder. Only a patched trial that ended ok under a throughput objective is screened,
    against the Doctor's baseline ``timing``; where the config switches compilation (its first
    steps compile, an honest one-time cost the baseline does not pay) only its start line is."""
    m = record.metrics
    if (
        contract.objective == "e2e_time"
        or timing is None
        or not record.patches
        or record.status is not TrialStatus.OK
        or m is None
    ):
        return record
    compile_knobs = manifest.knobs_with_role("compile")
    compiles = not same_config((record.knobs, []), (baseline_knobs, []), dims=compile_knobs)
    reasons = moved_work(m, timing, one_time=not compiles)
    if not reasons:
        return record
    refused = record.model_copy(
        update={
            "status": TrialStatus.INVALID,
            "error": "arrivals against the Doctor's baseline: " + "; ".join(reasons),
        }
    )
    if refused.trial_dir and Path(refused.trial_dir).is_dir():
        refused.save(Path(refused.trial_dir) / "record.json")
    return refused
