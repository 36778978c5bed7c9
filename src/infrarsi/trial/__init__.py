"""Trials: one isolated, measured run of a workload under a knob assignment and a patch set."""

from infrarsi.records.trial import PatchRef, TrialMetrics, TrialRecord, TrialStatus
from infrarsi.trial.patching import PatchFailed, PatchRefused
from infrarsi.trial.preparation import prepare
from infrarsi.trial.runner import run_trial
from infrarsi.trial.spec import TrialSpec

__all__ = [
    "PatchFailed",
    "PatchRef",
    "PatchRefused",
    "TrialMetrics",
    "TrialRecord",
    "TrialSpec",
    "TrialStatus",
    "prepare",
    "run_trial",
]
