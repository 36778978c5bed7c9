"""The step-time model's prior, trusted only as far as the trials bear it out.

The InfraRSI searcher fits its step-time model on the measured log times less a prior: the
catalog's patch ratios (and the experience bank's columns, when it advised). A patch's prior
is trusted only as far as measured: once at least ``PATCH_FADE_MIN`` trials with it ran, its
weight drops to 0 when the trials make that more likely (the GP's marginal likelihood, on the
raw scale) — patch by patch, so a catalog ratio that does not hold on this host fades while
the others stay. The bank's prior comes in the same way, one column per knob and patch it
speaks of (the negative-transfer guard), after the bank as a whole is weighed
(``_bank_weight``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from infrarsi.run.steptime import StepTimeModel

Array = np.ndarray

PRIOR_DROP_EVIDENCE = 2.0  # log-evidence the trials must gain to drop a patch's prior
PATCH_FADE_MIN = 2  # trials with (and without) a patch before its prior may be dropped
BANK_FADE_MIN = 3  # trials in all before a part of the bank's prior may be dropped
# the prior sd of the weight on the bank's prior (mean 1: it holds as the bank says): chosen
# before any replay, one sd spans "no effect here" to "twice the effect"
BANK_WEIGHT_SD = 1.0


@dataclass(frozen=True)
class TimedTrials:
    """What the step-time model is fitted on: the model family, the trials' encoded configs
    ``X``, their log times (drift and the Doctor's measured offsets taken out), each trial's
    prior columns ``catalog`` (the catalog's patches first, then the bank's), each trial's
    noise variance, and the fit's seed."""

    family: str
    X: Array
    logs: Array
    catalog: Array
    noise: Array
    seed: int

    def fit(self, weights: Array) -> StepTimeModel:
        """The step-time model on the times less the prior columns weighted by ``weights``."""
        return StepTimeModel(self.family, seed=self.seed).fit(
            self.X, np.exp(self.logs - self.catalog @ weights), self.noise
        )


def faded_time_model(trials: TimedTrials, n_catalog: int) -> tuple[StepTimeModel, Array]:
    """The step-time model and each prior column's weight (1 or 0; the bank's scaled first).
    Columns from ``n_catalog`` on are the bank's: one touches most configs, so it may fade
    once ``PATCH_FADE_MIN`` trials it touched and ``BANK_FADE_MIN`` trials in all ran. Before
    that per-column test, the bank as a whole is weighed (``_bank_weight``): split over a
    dozen columns, each too weakly tested alone to drop, a bank turned round kept its full say
    for 6-8 trials."""
    catalog, n = trials.catalog, len(trials.logs)
    weights = np.ones(catalog.shape[1])
    model = trials.fit(weights)
    if trials.family != "gp" or not catalog.any():
        return model, weights
    if catalog.shape[1] > n_catalog and n >= BANK_FADE_MIN:
        model, weights = _bank_weight(trials, weights, model, n_catalog)
    evidence = model.log_evidence()
    for j in range(catalog.shape[1]):
        with_patch = int(np.count_nonzero(catalog[:, j]))
        if j >= n_catalog:
            if with_patch < PATCH_FADE_MIN or n < BANK_FADE_MIN:
                continue
        elif with_patch < PATCH_FADE_MIN or n - with_patch < PATCH_FADE_MIN:
            continue
        trial = weights.copy()
        trial[j] = 0.0
        other = trials.fit(trial)
        gained = other.log_evidence()
        if evidence is not None and gained is not None and gained > evidence + PRIOR_DROP_EVIDENCE:
            model, weights, evidence = other, trial, gained
    return model, weights


def _bank_weight(
    trials: TimedTrials, weights: Array, model: StepTimeModel, n_catalog: int
) -> tuple[StepTimeModel, Array]:
    """The bank's prior as a whole, scaled by how far these trials bear it out: the
    posterior mean of one weight on its columns' sum (``StepTimeModel.basis_weight``, prior
    ``N(1, BANK_WEIGHT_SD^2)``, the GP's kernel marginalised), kept in [0, 1] — never
    stronger than the bank said, never turned around. A bank whose claims run against this
    host's first trials loses its say before any one column could be refuted alone; one they
    bear out keeps it. The kernel is the one fitted with the bank at full weight: a
    turned-round bank leaves that fit more to absorb, so the test leans towards keeping what
    the bank says."""
    catalog = trials.catalog
    bank = catalog[:, n_catalog:] @ weights[n_catalog:]
    residual = trials.logs - catalog[:, :n_catalog] @ weights[:n_catalog]
    fitted = model.basis_weight(trials.X, residual, bank, trials.noise, BANK_WEIGHT_SD)
    if fitted is None or fitted[0] >= 1.0:
        return model, weights
    weights = weights.copy()
    weights[n_catalog:] *= max(0.0, fitted[0])
    return trials.fit(weights), weights
