"""The stages of one optimisation round, by one name each: what events, the store and the bank
say a thing belongs to. A ground-floor module: every stage and the store read it, it reads
nothing of theirs."""

from __future__ import annotations

from infrarsi.enums import ValueEnum


class Stage(ValueEnum):
    """A stage of ``optimize``, in the order one round runs them, and ``derive`` (the winner
    becoming the next round's baseline). Trials belong to ``doctor`` (a baseline run, the
    profiled run, a calibration run), ``run`` (a search trial), ``propose`` (a smoke trial the
    proposer ran to validate a patch during the search: not a search trial, in the ledger and
    the audit all the same) or ``apply`` (a measurement of Apply's interleaved rounds):
    ``TRIAL_STAGES``."""

    INIT = "init"
    DOCTOR = "doctor"
    RUN = "run"
    PROPOSE = "propose"
    APPLY = "apply"
    REPORT = "report"
    DERIVE = "derive"


TRIAL_STAGES = (Stage.DOCTOR, Stage.RUN, Stage.PROPOSE, Stage.APPLY)
