"""What the InfraRSI searcher fits on its trials before each proposal: the censored memory
model (an OOM is a right-censored peak) and the step-time prior's columns (the catalog's
patches, the knob priors and the experience bank's parts, each to fade on its own)."""

from __future__ import annotations

import numpy as np

from infrarsi.records.trial import TrialStatus
from infrarsi.run.memory import MemoryObservation, TobitMemoryModel
from infrarsi.run.problem import Outcome, Problem
from infrarsi.run.space import Config

BANK = "bank"  # the bank's prior columns in ``patch_weights`` are ``bank:<knob or patch>``


def peak_or_bound(o: Outcome) -> float:
    """What an outcome says of peak memory: the measured peak, or (OOM) the capacity it
    exceeded — a right-censored observation."""
    value = o.peak_bytes if o.status.is_ok() else o.cap_bytes
    if value is None:
        raise ValueError(f"a {o.status} outcome without a peak or a bound enters no memory model")
    return value


def fit_memory(
    problem: Problem, history: list[tuple[Config, Outcome]], censored: bool
) -> TobitMemoryModel:
    """The memory model on every trial that measured a peak and (``censored``) every OOM
    as a bound, over the problem's analytic offsets where it has them."""
    rows = [
        (problem.index[c], o)
        for c, o in history
        if (o.status == TrialStatus.OK and o.peak_bytes)
        or (censored and o.status == TrialStatus.OOM and o.cap_bytes)
    ]
    at = [i for i, _ in rows]
    return TobitMemoryModel().fit(
        problem.X[at],
        [MemoryObservation(peak_or_bound(o), o.status is TrialStatus.OOM) for _, o in rows],
        None if problem.offsets is None else problem.offsets[at],
    )


def prior_columns(
    problem: Problem, history: list[tuple[Config, Outcome]], shrink: float
) -> tuple[np.ndarray, list[str], int]:
    """(n, P + K [+ B]) prior parts over the candidates, their names, and how many are the
    catalog's (the rest the bank's): the catalog's patches and the knob priors at ``shrink``
    of their claim, then the bank's testable parts — none once a bank seed did not hold here
    (each part is trusted as far as its own trials agree: the negative-transfer guard)."""
    p = problem
    catalog = shrink * np.hstack([p.catalog_parts, p.knob_prior_parts])
    names = list(p.patch_ids) + list(p.knob_prior_names)
    n_catalog = len(names)
    used = [] if p.bank_contradicted(history) else p.bank_testable()
    if used:
        catalog = np.hstack([catalog, p.bank_parts[:, used]])
        names = names + [f"{BANK}:{p.bank_names[j]}" for j in used]
    return catalog, names, n_catalog
