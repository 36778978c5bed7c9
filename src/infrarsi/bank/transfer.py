"""From past experiences to advice for a new run: seeds and priors, weighted by similarity.

Each experience weighs ``w = similarity(its host and workload, these)`` (``signatures``; how
fast bf16 is on either host counts only for a config that runs it); those below
:data:`MIN_SIMILARITY` are left out. Two additive models are fitted by weighted ridge
regression over the features of a config (one per knob value, one per patch;
``records.bank_features``): the log step-time ratio to the baseline of the same run, and the log
peak-memory ratio to it. The ridge's prior precision :data:`RIDGE` is in units of experience
weight, so a feature seen once on the same host (weight 1) keeps half its measured effect; and
each model's effects are scaled by its ``fidelity`` — the similarity of the experiences behind
it — so what a host at similarity 0.2 measured, however often, carries a fifth of its effect
here. Censored outcomes (an OOM, a trial cut short) enter neither model.

Every experience's knobs are first read as they would be on this host (``translate``, built by
``translate.translator`` from the workload's manifest): a rank count per node scales with the
host's cores or GPUs, so what was one rank per core there is one rank per core here; an
experience that names no config here (a fractional rank count) informs the models only.

Seeds are whole configs that ran: ranked by expected speed-up here — the weighted mean of their
experiences' log speed-ups scaled by their similarity as the models' are, so the log of the
expected speed-up is already speed-up times similarity, counted once (multiplying by the
similarity again ranked a 1.2x config of a host at 0.146 above a 1.35x one at 0.127: the
similarity, not the gain, decided) — never one that mostly ran out of memory, and only
those expected to gain at least :data:`SEED_MIN_SPEEDUP`. A seed that ran there as it reads here
carries its measured peak over its run's baseline peak (``peak_ratio``): with this run's
measured baseline peak it says whether the seed fits here, where the analytic estimate only
guesses (``Problem.start_points``). Every seed is measured here like any trial; the search's
time model admits only the prior's claims a trial here could contradict (at least one
run-to-run sd: ``Problem.bank_testable``), weighs the prior as a whole by how far this host's
trials bear it out, and drops a part they contradict (the negative-transfer guard, in
``run/infrarsi_searcher.py``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from infrarsi.bank.signatures import similarity
from infrarsi.bank.translate import Translate
from infrarsi.identity import config_key
from infrarsi.records import BankAdvice, BankSeed, bank_features
from infrarsi.records.trial import TrialStatus
from infrarsi.store.bank import Experience

MIN_SIMILARITY = 0.02
RIDGE = 1.0
SEEDS = 2
SEED_MIN_SPEEDUP = 1.02
SEED_MAX_OOM_SHARE = 0.5


def advise(
    experiences: list[Experience],
    hardware: dict,
    workload: dict,
    *,
    bank_url: str,
    max_seeds: int = SEEDS,
    baseline: dict | None = None,
    translate: Translate | None = None,
    low_precision: Callable[[dict], bool] | None = None,
) -> BankAdvice:
    """The bank's advice for a run on ``hardware`` x ``workload`` (signatures) whose baseline
    knobs are ``baseline`` (never a seed: every run measures it anyway); ``translate``: how an
    experience's knobs read here (as measured without one); ``low_precision``: whether a
    config runs in a 16-bit float precision (``signatures.low_precision_reader``; every config
    without one), so that how fast bf16 is on either host weighs only such outcomes, or all of
    them when the baseline here runs one."""
    low = low_precision or (lambda knobs: True)
    everything = baseline is not None and bool(baseline) and low(baseline)
    weighted = [
        (
            e,
            similarity(
                e.hardware_json,
                e.workload_json,
                hardware,
                workload,
                everything or low(e.knobs_json),
            ),
        )
        for e in experiences
    ]
    weighted = [(e, w) for e, w in weighted if w >= MIN_SIMILARITY]
    read = {
        id(e): translate(e.knobs_json, e.hardware_json) if translate else (e.knobs_json, True)
        for e, _ in weighted
    }
    here = {i: knobs for i, (knobs, _) in read.items()}
    timed, sized = _observations(weighted, here)
    notes = []
    if experiences and not weighted:
        notes.append(
            f"none of the bank's {len(experiences)} experiences is similar enough to "
            f"this host and workload (similarity < {MIN_SIMILARITY})"
        )
    return BankAdvice(
        bank_url=bank_url,
        hardware=hardware,
        workload=workload,
        experiences=len(experiences),
        used=len(weighted),
        weight=float(sum(w for _, w in weighted)),
        time_coefficients=_scaled(ridge(timed), fidelity(timed)),
        memory_coefficients=_scaled(ridge(sized), fidelity(sized)),
        seeds=seeds([(e, w) for e, w in weighted if read[id(e)][1]], max_seeds, baseline, here),
        notes=notes,
    )


def _observations(
    weighted: list[tuple[Experience, float]], here: dict[int, dict]
) -> tuple[list, list]:
    """(features, log time ratio, weight) of each timed outcome and (features, log peak ratio,
    weight) of each sized one, every experience's knobs read as on this host (``here``)."""
    timed = [
        (bank_features(here[id(e)], _ids(e)), -math.log(e.speedup), w)
        for e, w in weighted
        if e.status.is_ok() and not e.censored and e.speedup
    ]
    sized = [
        (
            bank_features(here[id(e)], _ids(e)),
            math.log(e.peak_mem_bytes / e.baseline_peak_mem_bytes),
            w,
        )
        for e, w in weighted
        if e.status.is_ok() and e.peak_mem_bytes and e.baseline_peak_mem_bytes
    ]
    return timed, sized


def peak_ratio(experiences: list[Experience]) -> float | None:
    """A config's measured per-rank peak over its run's baseline peak: the geometric mean over
    ``experiences`` that measured both (None if none did). Unscaled by similarity: how much
    more memory a config needs than the baseline is a property of the program and its knobs
    far more than of the host's speed, and it is used only where the config ran there as it
    reads here."""
    logs = [
        math.log(e.peak_mem_bytes / e.baseline_peak_mem_bytes)
        for e in experiences
        if e.peak_mem_bytes and e.baseline_peak_mem_bytes
    ]
    return math.exp(sum(logs) / len(logs)) if logs else None


def fidelity(rows: list[tuple[list[str], float, float]]) -> float:
    """The share of a past effect expected to hold here: the similarity of the experiences
    behind a model, each weighted by itself (1 on the same host and workload). Many outcomes
    from a distant host make its effects certain *there*, not here: the ridge weighs how well
    they were measured, this how far they carry."""
    total = sum(w for _, _, w in rows)
    return sum(w * w for _, _, w in rows) / total if total else 0.0


def _scaled(coefficients: dict[str, float], factor: float) -> dict[str, float]:
    return {f: c * factor for f, c in coefficients.items() if c * factor}


def _ids(e: Experience) -> list[str]:
    return [p["id"] for p in e.patches_json]


def ridge(rows: list[tuple[list[str], float, float]], precision: float = RIDGE) -> dict[str, float]:
    """Weighted ridge regression without intercept: ``rows`` of (features, target, weight);
    returns each feature's coefficient."""
    if not rows:
        return {}
    names = sorted({f for features, _, _ in rows for f in features})
    col = {f: j for j, f in enumerate(names)}
    X = np.zeros((len(rows), len(names)))
    for i, (features, _, _) in enumerate(rows):
        X[i, [col[f] for f in features]] = 1.0
    y = np.array([t for _, t, _ in rows])
    w = np.array([w for _, _, w in rows])
    A = X.T @ (w[:, None] * X) + precision * np.eye(len(names))
    beta = np.linalg.solve(A, X.T @ (w * y))
    return {f: float(b) for f, b in zip(names, beta) if abs(b) > 1e-9}


def seeds(
    weighted: list[tuple[Experience, float]],
    max_seeds: int = SEEDS,
    baseline: dict | None = None,
    here: dict[int, dict] | None = None,
) -> list[BankSeed]:
    """Whole configs worth a first trial here (see the module's docstring); ``here``: each
    experience's knobs as they read on this host, by ``id`` (as measured where absent)."""
    here = here or {}
    knobs_of = lambda e: here.get(id(e), e.knobs_json)  # noqa: E731
    groups: dict[tuple, list[tuple[Experience, float]]] = defaultdict(list)
    skip = config_key(baseline, []) if baseline else None
    for e, w in weighted:
        key = config_key(knobs_of(e), _ids(e))
        if key != skip:
            groups[key].append((e, w))
    out = []
    for members in groups.values():
        if any(e.status is TrialStatus.INVALID for e, _ in members):
            continue  # a check refused it (Apply's, or the search's screen): never a start
        ok = [(e, w) for e, w in members if e.status.is_ok() and e.speedup and not e.censored]
        ooms = sum(w for e, w in members if e.status is TrialStatus.OOM)
        total = sum(w for _, w in members)
        if not ok or ooms > SEED_MAX_OOM_SHARE * total:
            continue
        weight = sum(w for _, w in ok)
        share = sum(w * w for _, w in ok) / weight  # how far its effect carries here
        expected = math.exp(share * sum(w * math.log(e.speedup or 1.0) for e, w in ok) / weight)
        if expected < SEED_MIN_SPEEDUP:
            continue
        best = max(w for _, w in ok)
        first = ok[0][0]
        sources = {(e.run_id, e.hardware_fp, e.workload, e.stage) for e, _ in ok}
        measured = {
            k: v
            for k, v in first.knobs_json.items()
            if bank_features({k: knobs_of(first).get(k)}, []) != bank_features({k: v}, [])
        }
        out.append(
            BankSeed(
                knobs=knobs_of(first),
                patches=sorted(_ids(first)),
                as_measured=measured,
                peak_ratio=None if measured else peak_ratio([e for e, _ in ok]),
                expected_speedup=expected,
                similarity=best,
                experiences=len(ok),
                sources=[
                    {"run_id": r, "hardware_fp": h, "workload": wl, "stage": st}
                    for r, h, wl, st in sorted(sources)
                ],
            )
        )
    out.sort(key=lambda s: -s.expected_speedup)
    return out[:max_seeds]
