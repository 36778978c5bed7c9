"""A search trial's arrivals, screened before the searcher is told: under a throughput objective
the search ranks a patched config cheaply (a hint: Apply promotes on the harness's clock
alone), and lines that cannot be real would rank a cheat first and take one of Apply's slots.
So a patched config's trial is ranked on the larger of its lines' steady step and its window
charged against the Doctor's baseline (``verify.clock.charged_by_window``: a run rehearsed
before its steps, spoofed or not, shows no saving there), and one whose arrivals the Doctor's
baseline contradicts (``verify.clock.moved_work``), or whose charge is impossible, is recorded
``invalid`` with the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infrarsi.contract import Contract
from infrarsi.identity import same_config
from infrarsi.records.trial import TrialStatus
from infrarsi.trial import TrialRecord
from infrarsi.trial.arrivals import Timing
from infrarsi.verify.clock import charged_by_window, moved_work
from infrarsi.workloads import Manifest


def screened(
    record: TrialRecord,
    contract: Contract,
    manifest: Manifest,
    baseline_knobs: dict[str, Any],
    timing: Timing | None,
) -> TrialRecord:
    """``record`` as the search ranks it, saved with its folder: with the step its window is
    charged against the Doctor's baseline ``timing`` (``window_step_time_s``), or (its
    arrivals refused, its charge impossible) the same trial ``invalid`` with why. Only a
    patched trial that ended ok under a throughput objective is screened; at other knobs than
    the baseline's only its start line is judged early or not (its one-time work may differ
    honestly), and where the config switches compilation its window is not charged either."""
    m = record.metrics
    if (
        contract.objective == "e2e_time"
        or timing is None
        or not record.patches
        or record.status is not TrialStatus.OK
        or m is None
    ):
        return record
    # The one-time work (the start-up, the warm-up) is judged where the knobs are the
    # baseline's: other knobs (more ranks) may start up slower, and a config that switches
    # compilation compiles in its first steps, a cost the baseline does not pay. Its window
    # ranks such a trial instead, the compiling one excepted (its window holds the compile).
    compile_knobs = manifest.knobs_with_role("compile")
    compiles = not same_config((record.knobs, []), (baseline_knobs, []), dims=compile_knobs)
    # A late start line is left to the window too: at the contract's few steps half of the
    # steady steps is within a loaded host's start-up noise (measured: an unchanged run 0.7 s
    # late), and work before the steps is in the window, which ranks the trial.
    same = same_config((record.knobs, []), (baseline_knobs, []))
    reasons = moved_work(m, timing, one_time=same, late=False)
    charge = None if compiles else charged_by_window(m, timing)
    if charge is not None and charge.impossible:
        reasons.append(charge.impossible)
    if reasons:
        judged = record.model_copy(
            update={
                "status": TrialStatus.INVALID,
                "error": "arrivals against the Doctor's baseline: " + "; ".join(reasons),
            }
        )
    elif charge is not None:  # unresolved (a few short steps): no gain over the Doctor's
        judged = record.model_copy(update={"window_step_time_s": charge.credited_step_s})
    else:
        return record
    if judged.trial_dir and Path(judged.trial_dir).is_dir():
        judged.save(Path(judged.trial_dir) / "record.json")
    return judged
