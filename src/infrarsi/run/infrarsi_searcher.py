"""The InfraRSI searcher: global models, a local search ordered by them, censored memory.

- **Start**: the baseline, the Doctor's suggestions and the experience bank's seeds, and the
  candidate the priors (patch metadata, the Doctor's calibration) expect fastest among those the
  analytic memory estimate says fit.
- **Then a local search** (``LOCAL``, ``run/local.py``, since 2026-12-05): the incumbent's
  neighbourhood — every untried config one free change away (a knob's value, a patch on or
  off; derived knobs follow) — ordered by the acquisition below; a far jump when the models
  predict an untried config clearly better than every neighbour (``JUMP_Z`` between-run
  standard deviations), likely to fit; the region widens one change at a time while it holds
  nothing the models expect to gain (``WIDEN_GAIN`` of the stop effect), and as a trust region
  grows after improvements in a row and falls back after failures. Nothing is measured twice
  inside the search but the drift check's baseline: Apply re-measures. On the 7 seen tables of
  >= 96 cells (16 seeds, ``bench/search_variants.py``) the mean area under the normalised
  regret curve was 0.339 against the earlier search's 0.369 and greedy's 0.360. The earlier
  step (``local=False``): each free knob and patch compared alone once (``_cover``), then the
  global acquisition inside a CASMOPOLITAN trust region of radius ``TRUST_RADIUS``,
  re-measuring the top two configs one trial in ``RERUN_EVERY``.
- **The acquisition**: the censored memory model and the step-time model are fitted on every
  trial so far; a candidate scores ``log EI + log P(fits)`` per expected second of wall time
  (compile and start-up included; a trial past the slow bound costs at most the bound). EI is
  taken against the incumbent: the best posterior mean among the configs that ran, not the
  luckiest measurement. The step-time model's prior mean is what the Doctor measured on this
  host (bf16, another split: trusted as measured) plus the catalog's patch ratios at half
  strength, each patch's dropped once its own trials say it does not hold here. A config the
  Doctor measured 1.5x slower is never proposed. Only what the memory model is 90% sure will
  not fit is excluded (a hard cut at 50% kept the dense-2node table's fastest cells, which sit
  near the capacity, out of reach).
- **Pairing** (``PAIRING``, off since the local search: it did not pay): when the candidate
  with the highest EI is likely to run out of memory, its memory-saving variants that the
  memory model expects to fit are proposed in its place.
- **Drift**: the baseline is measured again every ``drift.REBASE_EVERY`` trials; when its
  repeats say the load changed, each trial is compared against the baseline measured nearest in
  time (``drift.offsets``), so a config is ranked by its ratio to that, not by when it ran.
- **Slow trials cut short** (``slow_bound``): a trial still running after ``k`` times the
  incumbent's cost is ended and told ``slow``, its time right-censored at ``k`` times the
  incumbent's (entered at that bound: it only needs to look slow).
- **Stops** when the trials left are not expected to gain the minimum detectable effect: the
  sum of the best candidates' expected improvements, one per trial left, is below it.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from infrarsi.identity import differing_knobs
from infrarsi.records import Prediction
from infrarsi.run import drift
from infrarsi.run.cost import TrialCostModel
from infrarsi.run.local import Scores, free_codes, local_step
from infrarsi.run.memory import MemoryObservation, TobitMemoryModel
from infrarsi.run.problem import (
    MEASURED_SLOW,
    Outcome,
    Problem,
    SlowBound,
    distance,
    free_change,
)
from infrarsi.run.searcher_base import Searcher
from infrarsi.run.space import Config
from infrarsi.run.steptime import StepTimeModel
from infrarsi.trial.record import TrialStatus

Array = np.ndarray
# the models fitted on the trials so far: memory, step time, the prior added to the step-time
# model's mean, trial cost, and the ok trials (candidate index, outcome)
Fitted = tuple[TobitMemoryModel, StepTimeModel, Array, TrialCostModel, list[tuple[int, Outcome]]]
# per candidate: log step-time mean and sd, P(OOM), expected cost; the incumbent's index
Predicted = tuple[Array, Array, Array, Array, int | None]

# the start: the baseline, the seeds and the priors' pick (``N_SEEDS - 1`` space-filling points
# after them; 1: none), then each free knob and patch compared alone once (``COVER``) — chosen on
# the 2026-12-04 study of the 15 informative tables seen (``bench/search_variants.py``, 16 seeds:
# mean rank by area 2.17 against the earlier 3 space-filling points' 2.57 and greedy's 2.63)
N_SEEDS = 1
COVER = True
RERUN_EVERY = 7  # one trial in seven re-measures a top candidate (METHODS: 10-15% of a budget)
RERUN_MAX = 3
FIRM_TOP = 3  # configs re-measured once exploring is expected to gain nothing
FIRM_MAX = 6  # measurements of one config at most
P_OOM_MAX = 0.9  # never propose what the memory model is this sure will not fit
PAIR_RISK = 0.5
# pairing (a likely OOM's memory-saving variants proposed in its place): off since the local
# search, whose neighbourhood holds those variants anyway; on the 16 informative seen tables
# (10 seeds) the local search ranked 3.94 with it and 3.56 without, on the 7 of >= 96 cells (16
# seeds) 4.71 with it and 4.79 without: it did not pay (bench/search_variants.py)
PAIRING = False
PAIR_SAFE = 0.2


class InfraRSISearcher(Searcher):
    """Model-based joint search over knobs and patches with a censored memory model."""

    name = "infrarsi"

    def __init__(
        self,
        problem: Problem,
        seed: int = 0,
        family: str = "gp",
        cut_slow: bool = True,
        censored: bool = True,
        pairing: bool | None = None,
        local: bool | None = None,
    ):
        """``cut_slow``, ``censored`` (OOMs enter the memory model as censored observations)
        and ``pairing`` (None: ``PAIRING``) switch ideas on and off for the benchmark's
        ablations; ``local``: after the
        start, the incumbent's neighbourhood ordered by the models (``run/local.py``) rather
        than cover, re-measures and a global acquisition (None: ``LOCAL``)."""
        super().__init__(problem, seed)
        self.family, self.cut_slow = family, cut_slow
        self.censored = censored
        self.pairing = PAIRING if pairing is None else pairing
        self.local = LOCAL if local is None else local
        self._codes: Array | None = None
        self.start = self._initial_design()
        self.last: Prediction | None = None  # the models' predictions for the last proposal
        self.paired = 0
        self._cache: tuple[int, Predicted] | None = None

    # -- the start ------------------------------------------------------------------------
    def _initial_design(self) -> list[Config]:
        """The baseline and the Doctor's seeds; then the candidate the priors expect fastest
        among those the analytic estimate says fit; then space-filling picks (each the fitting
        candidate farthest from the design so far) so the first trials also tell the models
        what the priors do not know — which knobs matter here, and whether the patches' prior
        speed-ups hold on this host."""
        p = self.problem
        design = p.start_points()
        # what this host measured slow (the Doctor's calibration: bf16 where it is emulated)
        # is not worth a trial to learn what is already known
        fits = p.analytic_fits() & (p.measured <= math.log(MEASURED_SLOW))
        pool = [i for i in range(len(p.candidates)) if fits[i]]
        order = list(self.rng.permutation(pool))
        while len(design) < N_SEEDS + 1 + len(p.seeds) and order:
            gap = [min(distance(p.candidates[i], d) for d in design) for i in order]
            best = int(np.argmax(gap))
            if gap[best] == 0:
                break
            design.append(p.candidates[order[best]])
        return list(dict.fromkeys(design))

    # -- the models ------------------------------------------------------------------------
    def _fit(self) -> Fitted:
        p = self.problem
        idx = [p.index[c] for c, _ in self.history]
        outs = [o for _, o in self.history]
        mem_rows = [
            (i, o)
            for i, o in zip(idx, outs)
            if (o.status == TrialStatus.OK and o.peak_bytes)
            or (self.censored and o.status == TrialStatus.OOM and o.cap_bytes)
        ]
        memory = TobitMemoryModel().fit(
            p.X[[i for i, _ in mem_rows]],
            [
                MemoryObservation(_peak_or_bound(o), o.status is TrialStatus.OOM)
                for _, o in mem_rows
            ],
            None if p.offsets is None else p.offsets[[i for i, _ in mem_rows]],
        )
        ok = [(i, o) for i, o in zip(idx, outs) if o.status == TrialStatus.OK]
        # a slow trial enters at the time it was cut at: a lower bound, k times the incumbent's
        # (taken as observed: far from the best either way, it only needs to look slow)
        at = [k for k, o in enumerate(outs) if o.status in (TrialStatus.OK, TrialStatus.SLOW)]
        timed = [(idx[k], outs[k]) for k in at]
        rows = [i for i, _ in timed]
        catalog, names = PRIOR_SHRINK * p.catalog_parts, list(p.patch_ids)  # (n, P)
        used = p.bank_testable()
        if p.bank_contradicted(self.history):  # a seed of the bank's did not hold here
            used = []
        if used:  # the bank's prior: a column per knob or patch, each trusted as far as
            # its own trials agree (the negative-transfer guard)
            catalog = np.hstack([catalog, p.bank_parts[:, used]])
            names = names + [f"{BANK}:{p.bank_names[j]}" for j in used]
        self.drift_log = self._drift(outs)  # each trial against the baseline nearest in time
        logs = (
            np.array([math.log(o.time_s) for _, o in timed]) - p.measured[rows] - self.drift_log[at]
        )
        # a trial's own steps say how steady it ran; repeated runs of one config differ by
        # more (the Doctor's between-run noise): a single lucky trial must not be believed
        floor = p.noise_var_log if DOCTOR_NOISE_FLOOR else 0.0
        noise = np.array([max(o.noise_var_log or 1e-4, floor) for _, o in timed])
        seed = int(self.rng.integers(1 << 30))
        time_model, weights = self._time_model(
            p.X[rows], logs, catalog[rows], noise, seed, n_catalog=len(p.patch_ids)
        )
        self.patch_weights = dict(zip(names, map(float, weights)))
        prior = catalog @ weights + p.measured
        costs = TrialCostModel().fit(
            p.X[idx],
            np.array([o.cost_s for o in outs]),
            np.array([o.status == TrialStatus.OOM for o in outs]),
        )
        return memory, time_model, prior, costs, ok

    def _drift(self, outs: list[Outcome]) -> np.ndarray:
        """Per trial, the load change to take out of its log time (``drift.offsets``)."""
        base = self.problem.baseline
        times = [math.log(o.time_s) if o.status.is_ok() else None for o in outs]
        return drift.offsets(
            times, [c == base for c, _ in self.history], self.problem.noise_var_log
        )

    def _time_model(
        self,
        X: Array,
        logs: Array,
        catalog: Array,
        noise: Array,
        seed: int,
        n_catalog: int | None = None,
    ) -> tuple[StepTimeModel, Array]:
        """The step-time model on the measured times less the catalog's prior, and each
        patch's prior weight (1 or 0). A patch's prior is trusted only as far as measured: once
        at least ``PATCH_FADE_MIN`` trials with it ran, its weight drops to 0 when the trials
        make that more likely (the GP's marginal likelihood, on the raw scale) — patch by
        patch, so a catalog ratio that does not hold on this host fades while the others
        stay. The experience bank's prior comes in the same way, one column per knob and
        patch it speaks of (the negative-transfer guard: what the bank learned on another host
        about, say, the rank count loses its say once this host's trials contradict it, while
        its part on precision stays if they agree). Columns from ``n_catalog`` on are the
        bank's: one touches most configs, so it may fade once ``PATCH_FADE_MIN`` trials it
        touched and ``BANK_FADE_MIN`` trials in all ran. Before that per-column test, the
        bank as a whole is weighed (``_bank_weight``): split over a dozen columns, each too
        weakly tested alone to drop, a bank turned round kept its full say for 6-8 trials."""
        weights = np.ones(catalog.shape[1])
        model = self._fit_time(X, logs, catalog, weights, noise, seed)
        if self.family != "gp" or not catalog.any():
            return model, weights
        if n_catalog is not None and catalog.shape[1] > n_catalog and len(logs) >= BANK_FADE_MIN:
            model, weights = self._bank_weight(
                X, logs, catalog, weights, noise, seed, model, n_catalog
            )
        evidence = model.log_evidence()
        for j in range(catalog.shape[1]):
            with_patch = int(np.count_nonzero(catalog[:, j]))
            if n_catalog is not None and j >= n_catalog:
                if with_patch < PATCH_FADE_MIN or len(logs) < BANK_FADE_MIN:
                    continue
            elif with_patch < PATCH_FADE_MIN or len(logs) - with_patch < PATCH_FADE_MIN:
                continue
            trial = weights.copy()
            trial[j] = 0.0
            other = self._fit_time(X, logs, catalog, trial, noise, seed)
            gained = other.log_evidence()
            if (
                evidence is not None
                and gained is not None
                and gained > evidence + PRIOR_DROP_EVIDENCE
            ):
                model, weights, evidence = other, trial, gained
        return model, weights

    def _bank_weight(
        self,
        X: Array,
        logs: Array,
        catalog: Array,
        weights: Array,
        noise: Array,
        seed: int,
        model: StepTimeModel,
        n_catalog: int,
    ) -> tuple[StepTimeModel, Array]:
        """The bank's prior as a whole, scaled by how far these trials bear it out: the
        posterior mean of one weight on its columns' sum (``StepTimeModel.basis_weight``,
        prior ``N(1, BANK_WEIGHT_SD^2)``, the GP's kernel marginalised), kept in [0, 1] —
        never stronger than the bank said, never turned around. A bank whose claims run
        against this host's first trials loses its say before any one column could be
        refuted alone; one they bear out keeps it. The kernel is the one fitted with the bank
        at full weight: a turned-round bank leaves that fit more to absorb, so the test leans
        towards keeping what the bank says."""
        bank = catalog[:, n_catalog:] @ weights[n_catalog:]
        residual = logs - catalog[:, :n_catalog] @ weights[:n_catalog]
        fitted = model.basis_weight(X, residual, bank, noise, BANK_WEIGHT_SD)
        if fitted is None or fitted[0] >= 1.0:
            return model, weights
        weights = weights.copy()
        weights[n_catalog:] *= max(0.0, fitted[0])
        return self._fit_time(X, logs, catalog, weights, noise, seed), weights

    def _fit_time(
        self, X: Array, logs: Array, catalog: Array, weights: Array, noise: Array, seed: int
    ) -> StepTimeModel:
        return StepTimeModel(self.family, seed=seed).fit(X, np.exp(logs - catalog @ weights), noise)

    def _predict(self) -> Predicted:
        """Per candidate: log step-time mean and sd, P(OOM), expected cost; and the incumbent
        (fitted once per new trial)."""
        if self._cache is None or self._cache[0] != len(self.history):
            self._cache = (len(self.history), self._predict_now())
        return self._cache[1]

    def _predict_now(self) -> Predicted:
        p = self.problem
        memory, time_model, prior, costs, ok = self._fit()
        mu, sd = time_model.predict_log(p.X)
        mu = mu + prior
        p_oom = (
            memory.p_oom(p.X, p.capacity_bytes, p.offsets)
            if p.capacity_bytes
            else np.zeros(len(mu))
        )
        for c, o in self.history:  # what ran is known: an OOM stays an OOM at this capacity
            if not o.status.is_ok():
                p_oom[p.index[c]] = 1.0
        ran_ok = [i for i, _ in ok]
        incumbent = min(ran_ok, key=lambda i: mu[i]) if ran_ok else None
        self._peak = (
            memory.predict_peak_bytes(p.X, p.offsets)
            if (memory.n_obs_ or p.offsets is not None)
            else None
        )
        return mu, sd, p_oom, costs.predict_cost_s(p.X, p_oom), incumbent

    # -- proposing ---------------------------------------------------------------------------
    def ask(self) -> Config | None:
        first = self._start_or_rebase()
        if first is not None:
            self.last = self._describe(self.problem.index[first])
            return first
        if self.local:
            near = self._local_step()
            return near if near is not None else next(iter(self.ask_batch(1)), None)
        for step in (self._cover, self._rerun):
            again = step()
            if again is not None:
                self.last = self._describe(self.problem.index[again])
                return again
        batch = self.ask_batch(1)
        if self._nothing_left():
            again = self._firm_up()
            if again is not None:
                self.last = self._describe(self.problem.index[again])
                return again
        return batch[0] if batch else None

    def _start_or_rebase(self) -> Config | None:
        """The next untried start point, or the baseline when the drift check is due: the
        load may have changed since it was measured. None when neither is."""
        if self.problem.bank_contradicted(self.history):  # the bank's other seeds go
            refuted = set(self.problem.bank_seeds)
            self.start = [c for c in self.start if c in self.tried or c not in refuted]
        for c in self.start:
            if c not in self.tried:
                return c
        if drift.rebase_due(
            [c == self.problem.baseline for c, _ in self.history],
            len(self.history) - len(self.start),
        ):
            return self.problem.baseline
        return None

    def _local_step(self) -> Config | None:
        """The local search's next config (``local.local_step``): a neighbour of the
        incumbent by the acquisition, or a far jump the models predict clearly better; never
        a config already measured. None when nothing untried is allowed."""
        p = self.problem
        acq, log_ei, p_oom, incumbent = self._acquisition()
        if incumbent is None:
            return None
        untried = np.array([c not in self.tried for c in p.candidates])
        known_slow = p.measured > math.log(MEASURED_SLOW)  # the Doctor measured it already
        allowed = untried & (p_oom <= P_OOM_MAX) & ~known_slow
        if self._codes is None:
            free = [d.name for d in p.space.dims if d.name not in p.derived]
            self._codes = free_codes(p.candidates, free, list(p.space.patches))
        noise_sd = math.sqrt(max(p.noise_var_log, NOISE_VAR_MIN))
        step = local_step(
            Scores(acq, self._predict()[0], log_ei, p_oom, allowed),
            self._codes,
            incumbent,
            self.trust_radius() or LOCAL_RADIUS,
            margin=JUMP_Z * noise_sd,
            least_gain=WIDEN_GAIN * self._stop_effect(),
            jump_p_oom=PAIR_SAFE,
        )
        gains = np.where(untried, np.exp(log_ei) * (1 - p_oom), 0.0)
        self._gains = np.sort(gains)[::-1][:MAX_LEFT]
        if step is None:
            return None
        pick = step.index
        if step.how == "neighbour":
            pick = self._pair(pick, log_ei, p_oom, acq, untried, [])
        self.last = self._describe(pick)
        return p.candidates[pick]

    def _nothing_left(self) -> bool:
        """Whether no untried config is expected to gain the minimum effect (the stop rule,
        summed over every candidate kept rather than the trials left)."""
        gains = getattr(self, "_gains", None)
        return (
            gains is not None
            and len(self.history) >= 8
            and float(np.sum(gains)) < self._stop_effect()
        )

    def _stop_effect(self) -> float:
        """The gain in log step time below which exploring is not worth a trial."""
        return min(self.problem.min_effect, STOP_EFFECT_MAX)

    def _firm_up(self) -> Config | None:
        """A trial past the point where exploring is expected to gain nothing: the top configs
        by posterior mean measured again (fewest measurements first), so the ranking Apply
        reads rests on repeats rather than on one draw — and no trial is spent on a config
        the models expect to be slower or to run out of memory."""
        return self._least_measured_top(FIRM_TOP, FIRM_MAX)

    def _least_measured_top(self, k: int, cap: int) -> Config | None:
        """Of the ``k`` configs that ran ok with the best posterior mean, the one measured
        fewest times, if under ``cap`` measurements."""
        mu = self._predict()[0]
        counts: dict[Config, int] = {}
        for c, o in self.history:
            if o.status == TrialStatus.OK:
                counts[c] = counts.get(c, 0) + 1
        top = sorted(counts, key=lambda c: mu[self.problem.index[c]])[:k]
        fewest = [c for c in top if counts[c] < cap]
        return min(fewest, key=lambda c: counts[c]) if fewest else None

    def _rerun(self) -> Config | None:
        """Every ``RERUN_EVERY``-th trial, the top-2 configs by posterior mean that ran least
        often are measured again: under noise the incumbent is an estimate, and a second
        measurement is what separates a fast config from a lucky one."""
        after_start = len(self.history) - len(self.start)
        if after_start <= 0 or after_start % RERUN_EVERY != RERUN_EVERY - 1:
            return None
        return self._least_measured_top(2, RERUN_MAX)

    def _describe(self, i: int) -> Prediction | None:
        """The models' predictions for candidate ``i`` (None before any trial)."""
        if not self.history:
            return None
        mu, sd, p_oom, _, _ = self._predict()
        peak = None if self._peak is None else float(self._peak[i])
        return Prediction(
            ranked_time_per_step_s=float(np.exp(mu[i])), p_oom=float(p_oom[i]), peak_bytes=peak
        )

    def ask_batch(self, k: int) -> list[Config]:
        """Up to ``k`` untried configs; a batch keeps diverse by penalising the neighbours
        (one change away) of those already chosen and of those in flight (local
        penalisation: with trials in parallel, the next slot's proposal is not a neighbour of
        an unmeasured one when another is about as promising)."""
        p = self.problem
        untried = np.array([c not in self.tried for c in p.candidates])
        if not untried.any():
            return []
        acq, log_ei, p_oom, incumbent = self._acquisition()
        allowed = untried & (p_oom <= P_OOM_MAX)
        if not allowed.any():
            allowed = untried
        region = self._trust_region(incumbent)
        if region is not None and (allowed & region).any():
            allowed = allowed & region
        chosen: list[int] = []
        flying = [p.index[c] for c in self.in_flight()]
        for _ in range(k):
            score = np.where(allowed, acq, -np.inf)
            for j in chosen + flying:
                near = np.array([distance(c, p.candidates[j]) <= 1 for c in p.candidates])
                score = np.where(near, score - 2.0, score)
                score[j] = -np.inf
            if not np.isfinite(score).any():
                break
            pick = int(np.argmax(score))
            pick = self._pair(pick, log_ei, p_oom, acq, untried, chosen)
            chosen.append(pick)
        self.last = self._describe(chosen[0]) if chosen else None
        gains = np.where(untried, np.exp(log_ei) * (1 - p_oom), 0.0)
        self._gains = np.sort(gains)[::-1][:MAX_LEFT]
        return [p.candidates[j] for j in chosen]

    def _acquisition(self) -> tuple[Array, Array, Array, int | None]:
        """Per candidate: ``log EI + log P(fits)`` per expected second of wall time (a trial
        past the slow bound costs at most the bound), ``log EI`` alone and P(OOM); and the
        incumbent's index."""
        mu, sd, p_oom, cost, incumbent = self._predict()
        best = mu[incumbent] if incumbent is not None else np.min(mu)
        log_ei = _log_ei(best, mu, sd)
        log_fit = np.log(np.clip(1 - p_oom, 1e-12, 1.0))
        bound = self.slow_bound()
        if bound is not None:  # a trial past the bound is cut there: it costs at most that
            cost = np.minimum(cost, bound.after_s)
        acq = log_ei + log_fit - np.log(np.maximum(cost, 1e-3))
        return acq, log_ei, p_oom, incumbent

    def _cover(self) -> Config | None:
        """While some free knob or patch has never been compared alone — no measured config
        has a tried neighbour that differs from it in that one change — the incumbent changed
        in one such dimension (the change the acquisition scores highest). A knob never varied
        looks flat to the step-time model, however much it matters; one comparison each lets
        the model see which do before it exploits. A change the Doctor measured slow on this
        host is known already and not tried. Off unless ``COVER``."""
        if not COVER or not self.history:
            return None
        p = self.problem
        ok = [c for c, o in self.history if o.status.is_ok()]
        covered = {free_change(p, a, b) for a in ok for b in self.tried if a != b}
        acq, _, p_oom, incumbent = self._acquisition()
        if incumbent is None:
            return None
        centre = p.candidates[incumbent]
        known_slow = p.measured > math.log(MEASURED_SLOW)  # the Doctor measured it already
        options = [
            i
            for i, c in enumerate(p.candidates)
            if c not in self.tried
            and p_oom[i] <= P_OOM_MAX
            and not known_slow[i]
            and (change := free_change(p, c, centre)) is not None
            and change not in covered
        ]
        return p.candidates[max(options, key=lambda i: acq[i])] if options else None

    def _trust_region(self, incumbent: int | None) -> Array | None:
        """The candidates within the trust radius (changes counted as in ``distance``) of the
        incumbent, or None (no region: before any trial ran ok, or switched off)."""
        radius = self.trust_radius()
        if radius is None or incumbent is None:
            return None
        p = self.problem
        centre = p.candidates[incumbent]
        return np.array([distance(c, centre) <= radius for c in p.candidates])

    def trust_radius(self) -> int | None:
        """The trust region's radius after the trials so far, replayed from the history (so
        a resumed search has the same): ``TRUST_RADIUS`` at first; one wider after
        ``TRUST_SUCCESSES`` trials in a row that improved on the best measured time, one
        narrower after ``TRUST_FAILURES`` in a row that did not, back to the start below 1
        (a restart: the models keep every trial)."""
        start = LOCAL_RADIUS if self.local else TRUST_RADIUS
        if start is None:
            return None
        widest = len(self.problem.space.dims) + len(self.problem.space.patches)
        radius, wins, losses, best = start, 0, 0, math.inf
        started = set(self.start)
        for c, o in self.history:
            t = math.log(o.time_s) if o.status == TrialStatus.OK else math.inf
            if c in started or c == self.problem.baseline:
                best = min(best, t)
                continue
            if t < best:
                wins, losses, best = wins + 1, 0, t
            else:
                wins, losses = 0, losses + 1
            if wins >= TRUST_SUCCESSES:
                radius, wins = min(radius + 1, widest), 0
            if losses >= TRUST_FAILURES:
                radius, losses = radius - 1, 0
            if radius < 1:
                radius = start
        return radius

    def _pair(
        self,
        pick: int,
        log_ei: Array,
        p_oom: Array,
        acq: Array,
        untried: Array,
        chosen: list[int],
    ) -> int:
        """Swap in a memory-saving variant of the highest-EI candidate when that one is
        likely to run out of memory and the variant is expected to fit."""
        p = self.problem
        risky = int(np.argmax(np.where(untried, log_ei, -np.inf)))
        if (
            not self.pairing
            or p_oom[risky] <= PAIR_RISK
            or log_ei[risky] < log_ei[pick] + math.log(2)
        ):
            return pick
        variants = [
            p.index[v]
            for v in self._savers(p.candidates[risky])
            if v in p.index and untried[p.index[v]] and p.index[v] not in chosen
        ]
        safe = [j for j in variants if p_oom[j] <= PAIR_SAFE and acq[j] >= acq[pick] - math.log(4)]
        if not safe:
            return pick
        self.paired += 1
        return max(safe, key=lambda j: acq[j])

    def _savers(self, config: Config) -> list[Config]:
        """The config with each memory saver applied: checkpointing on, a smaller
        micro-batch, a memory patch added (the knobs that derive from them follow)."""
        s, knobs, out = self.problem.savers, config.knob_dict, []
        for c in self.problem.candidates:
            ck = c.knob_dict
            diff = differing_knobs(ck, knobs, knobs)
            added = c.patches - config.patches
            if not config.patches <= c.patches:
                continue
            if (
                s.checkpointing
                and diff == {s.checkpointing}
                and not added
                and str(ck[s.checkpointing]).lower() in ("true", "1")
            ):
                out.append(c)
            elif (
                s.micro_batch
                and s.micro_batch in diff
                and not added
                and float(ck[s.micro_batch]) < float(knobs[s.micro_batch])
                and diff - set(s.follows) == {s.micro_batch}
            ):
                out.append(c)
            elif not diff and added and added <= set(s.patches):
                out.append(c)
        return out

    def slow_bound(self) -> SlowBound | None:
        """Cut the next trial short once it has cost ``k`` times what the incumbent's trials
        cost (their median), ``k`` from the between-run noise (``slow_factor``); it is then
        told as ``slow`` at ``k`` times the incumbent's posterior step time. None before any
        trial ran ok, and when cutting is switched off (``cut_slow``)."""
        if not self.cut_slow:
            return None
        incumbent = self.recommend()
        if incumbent is None:
            return None
        costs = [
            o.cost_s
            for c, o in self.history
            if c == incumbent and o.status == TrialStatus.OK and o.cost_s
        ]
        if not costs:
            return None
        k = slow_factor(self.problem.noise_var_log)
        mu = self._predict()[0]
        return SlowBound(
            k * float(np.median(costs)), k * math.exp(mu[self.problem.index[incumbent]])
        )

    def recommend(self) -> Config | None:
        """The tried feasible config with the best posterior mean step time."""
        if not any(o.status == TrialStatus.OK for _, o in self.history):
            return None
        incumbent = self._predict()[4]
        return None if incumbent is None else self.problem.candidates[incumbent]

    def ranking(self, k: int) -> list[Config]:
        """Up to ``k`` distinct configs that ran ``ok``, by posterior mean step time."""
        ran = {c for c, o in self.history if o.status == TrialStatus.OK}
        if not ran:
            return []
        mu = self._predict()[0]
        return sorted(ran, key=lambda c: mu[self.problem.index[c]])[:k]

    def should_stop(self, trials_left: int | None = None) -> bool:
        if super().should_stop():
            return True
        if any(c not in self.tried for c in self.start) or len(self.history) < 8:
            return False
        return self.expected_gain(trials_left) < self._stop_effect()

    def expected_gain(self, trials_left: int | None = None) -> float:
        """What the trials left can still gain, in log step time: the sum of the best
        candidates' expected improvements (times P(fits)) — an upper bound on the expected
        improvement of the best of them, so the run stops only when even that is small."""
        gains = getattr(self, "_gains", None)
        if gains is None:
            return 1.0
        return float(np.sum(gains[: max(1, trials_left or 1)]))


def slow_factor(noise_var_log: float) -> float:
    """How many times the incumbent's cost a trial may take before it is cut short: at least
    ``SLOW_MIN``, wider on a noisy machine (``SLOW_Z`` between-run standard deviations in log
    time), so that noise alone cuts a config as fast as the incumbent with odds below 1e-4."""
    return max(SLOW_MIN, math.exp(SLOW_Z * math.sqrt(max(noise_var_log, 0.0))))


# a trust region around the incumbent (CASMOPOLITAN's, Wan et al. 2021: Hamming-distance
# regions for categorical and mixed spaces): proposals change at most this many knobs and
# patches of the incumbent; chosen on the 2026-12-03 replays of the six informative tables
# committed then (area under the normalised regret curve, 10 seeds: 0.630 -> 0.615)
TRUST_RADIUS: int | None = 2
# the local search (``run/local.py``, issue 52): set a priori on 2026-12-05 before any replay
# of it — the trust region starts at one change; a far config is jumped to when its posterior
# mean beats every neighbour's by JUMP_Z between-run standard deviations; a neighbourhood whose
# best expected gain is under WIDEN_GAIN of the stop effect counts as spent
LOCAL = True
LOCAL_RADIUS = 1
JUMP_Z = 2.0
WIDEN_GAIN = 0.25
# whether each trial's noise is at least the Doctor's between-run noise (three draws); off:
# the GP's white-noise kernel learns what the trials' own steps do not say
DOCTOR_NOISE_FLOOR = True
NOISE_VAR_MIN = 1e-4  # (1% in log time) the least between-run noise a jump's margin assumes
TRUST_SUCCESSES = 2
TRUST_FAILURES = 3
SLOW_MIN = 2.0
SLOW_Z = 4.0
MAX_LEFT = 200  # candidates whose expected gains are kept for the stopping rule
# the minimum detectable effect from 3 Doctor runs can be far off (dense-2node at bench: 20%,
# and the search stopped after 8 of 40 trials having found 1.9x); stop below 5% at most
STOP_EFFECT_MAX = 0.05
# a catalog ratio was measured elsewhere: it holds on this host or it does not, so the prior
# mean is half its effect in log time (the mean of "holds" and "no effect"); replays, 10 seeds,
# budget 40: dense-2node 23.5 -> 7.5 trials to 95% of the best, moe-1node 6 -> 6.5
PRIOR_SHRINK = 0.5
PRIOR_DROP_EVIDENCE = 2.0  # log-evidence the trials must gain to drop a patch's prior
PATCH_FADE_MIN = 2  # trials with (and without) a patch before its prior may be dropped
BANK = "bank"  # the bank's prior columns in ``patch_weights`` are ``bank:<knob or patch>``
BANK_FADE_MIN = 3  # trials in all before a part of the bank's prior may be dropped
# the prior sd of the weight on the bank's prior (mean 1: it holds as the bank says): chosen
# before any replay, one sd spans "no effect here" to "twice the effect"
BANK_WEIGHT_SD = 1.0


def _peak_or_bound(o: Outcome) -> float:
    """What an outcome says of peak memory: the measured peak, or (OOM) the capacity it
    exceeded — a right-censored observation."""
    value = o.peak_bytes if o.status.is_ok() else o.cap_bytes
    if value is None:
        raise ValueError(f"a {o.status} outcome without a peak or a bound enters no memory model")
    return value


def _log_ei(best: float, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """log expected improvement below ``best`` (minimisation), stable far in the tail."""
    z = (best - mu) / sd
    # EI = sd * (z * Phi(z) + phi(z)); for z << 0 use the asymptotic log phi(z) - log(z^2)
    with np.errstate(divide="ignore", invalid="ignore"):
        direct = np.log(
            np.maximum(z * special.ndtr(z) + np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi), 1e-300)
        )
        tail = -0.5 * z * z - 0.5 * math.log(2 * math.pi) - np.log(np.maximum(z * z, 1e-300))
    out: np.ndarray = np.log(sd) + np.where(z > -5, direct, tail)
    return out
