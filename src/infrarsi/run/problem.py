"""What every searcher is given and told: the problem (a finite candidate set with its priors and
capacity) and the outcome of each trial. Shared by real runs and by table replays alike."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from infrarsi.identity import ConfigKey, canonical_value, config_key
from infrarsi.records.trial import TrialStatus
from infrarsi.run.space import Config, Space


@dataclass(frozen=True)
class Outcome:
    """What one trial of a config showed. ``ranked_time_per_step_s`` is what the search ranks
    it by (the objective's reading of its record: the steady step, or the end-to-end time per
    step); ``peak_bytes`` is the largest per-rank peak when known; an ``oom`` trial carries the
    capacity it exceeded in ``cap_bytes`` (right-censored)."""

    status: TrialStatus  # a finished one; given as its value ("ok"), it becomes the enum
    ranked_time_per_step_s: float | None = None
    peak_bytes: float | None = None
    cost_s: float = 0.0
    cap_bytes: float | None = None
    noise_var_log: float | None = None

    def __post_init__(self) -> None:
        if self.status not in TrialStatus.finished():  # a str enum: "ok" is TrialStatus.OK
            raise ValueError(f"outcome status {self.status!r}: one of {TrialStatus.finished()}")
        status = TrialStatus(self.status)
        object.__setattr__(self, "status", status)
        if status in (TrialStatus.OK, TrialStatus.SLOW) and self.ranked_time_per_step_s is None:
            raise ValueError(
                f"an {self.status} outcome needs its ranked_time_per_step_s (for slow: the "
                "lower bound it was cut at)"
            )

    @property
    def time_s(self) -> float:
        """The time per step of an ``ok`` outcome (for ``slow``: the bound it was cut at);
        ValueError for an outcome that measured none."""
        if self.ranked_time_per_step_s is None:
            raise ValueError(f"a {self.status} outcome measured no time per step")
        return self.ranked_time_per_step_s


@dataclass(frozen=True)
class SlowBound:
    """A trial still running after ``after_s`` seconds (of its cost: set-up included) is cut
    short and told as ``slow`` with ``ranked_time_per_step_s`` = ``censored_step_time_s``, a
    lower bound on its time per step (right-censored, as an OOM's peak is at the capacity)."""

    after_s: float
    censored_step_time_s: float


@dataclass
class MemorySavers:
    """How to make a config need less memory at the same global batch: the knobs that do it
    and the catalog patches whose role is ``memory_saver``; ``follows``: knobs that change with
    the micro-batch at a fixed global batch (the accumulation steps)."""

    checkpointing: str | None = None
    micro_batch: str | None = None
    patches: tuple[str, ...] = ()
    follows: tuple[str, ...] = ()


@dataclass(frozen=True)
class Parallelism:
    """How a config's processes share the host's cores: the knobs that set the ranks (per
    node) and each rank's threads (0: the launcher's default, no claim), the nodes that run on
    this host, and its usable cores (None: unknown, no claim)."""

    ranks: str | None = None
    threads: str | None = None
    nodes: int = 1
    cores: int | None = None


@dataclass
class Problem:
    """A search problem: the candidates (every valid config), how to encode them, the per-rank
    capacity, the baseline, and the priors a model-based searcher may use."""

    candidates: list[Config]
    space: Space
    baseline: Config
    capacity_bytes: float | None = None
    analytic_log_peak: Callable[[list[Config]], np.ndarray | None] | None = None  # (n,) or
    # (n, k) parts that add up to the log analytic peak (see memory.TobitMemoryModel)
    prior_log_speed: Callable[[list[Config]], np.ndarray] | None = None
    seeds: list[Config] = field(default_factory=list)
    # which of ``seeds`` the experience bank gave (past runs elsewhere, not this host's Doctor)
    bank_seeds: list[Config] = field(default_factory=list)
    # each bank seed's expected log speed-up here, as the bank advised it (its similarity taken
    # into account); a seed without one is tried before the priors' pick
    bank_gain: dict[Config, float] = field(default_factory=dict)
    # each bank seed's log peak over its source baseline's peak, where the bank measured it on
    # the config as it reads here; with ``baseline_peak_bytes`` it decides whether the seed fits
    bank_peak: dict[Config, float] = field(default_factory=dict)
    # this host's measured per-rank peak of the baseline (the Doctor's), None when unmeasured;
    # it also scales the analytic memory formula (``calibrated``)
    baseline_peak_bytes: float | None = None
    # the catalog's log step-time ratio per patch (prior_log_speed is their sum when not given)
    patch_log_speed: dict[str, float] = field(default_factory=dict)
    # log step-time ratio this host measured for some knob values (the Doctor's calibration
    # runs: bf16, another split), trusted as measured rather than as a catalog's claim
    measured_log_speed: Callable[[list[Config]], np.ndarray] | None = None
    # the experience bank's prior log step-time ratio to the baseline (past runs, weighted by
    # their similarity to this host and workload): (n,) or (n, K) parts, one per knob or patch
    # it speaks of (their names in the callable's ``names``); the searcher drops each part
    # whose trials here contradict it
    bank_log_speed: Callable[[list[Config]], np.ndarray] | None = None
    # the host's word on each candidate's compute precision (``precision_prior``: its measured
    # bf16 and fp32 peaks), where the Doctor measured no change of precision; a knob prior
    precision_log_speed: Callable[[list[Config]], np.ndarray] | None = None
    derived: tuple[str, ...] = ()  # knobs that follow the others (the accumulation steps)
    savers: MemorySavers = field(default_factory=MemorySavers)
    parallelism: Parallelism = field(default_factory=Parallelism)
    min_effect: float = 0.02
    noise_var_log: float = 0.0  # between repeated runs of one config (the Doctor's measure)
    # whether the Doctor judged the host unsteady (its runs of the baseline spread more than
    # ``UNSTEADY_CV``, or it did not measure): only then is the baseline measured again mid-search
    unsteady: bool = True
    # the budget is counted in trials (a proposal scored by what one trial gains) rather than in
    # seconds (scored per expected second of wall time)
    per_trial: bool = True
    # every config the space names is a candidate unless the workload refuses it (a live run,
    # a full-factorial table); False for a sample of a larger space, where a peer's proposal
    # may name a config never measured (it then runs the nearest candidate: ``nearest``)
    complete: bool = True

    def __post_init__(self) -> None:
        if self.baseline not in set(self.candidates):
            self.candidates = [self.baseline] + list(self.candidates)
        self.index = {c: i for i, c in enumerate(self.candidates)}
        self.X = self.space.encode(self.candidates)
        self.patch_ids = sorted(self.patch_log_speed)
        # (n, P): each candidate's catalog log ratio, one column per patch
        self.catalog_parts = np.array(
            [
                [self.patch_log_speed[q] if q in c.patches else 0.0 for q in self.patch_ids]
                for c in self.candidates
            ]
        ).reshape(len(self.candidates), len(self.patch_ids))
        if self.prior_log_speed is None and self.patch_ids:
            self.prior_log_speed = lambda cs: np.array(
                [sum(self.patch_log_speed.get(q, 0.0) for q in c.patches) for c in cs]
            )
        self.offsets = calibrated(
            self.analytic_log_peak(self.candidates) if self.analytic_log_peak else None,
            self.index[self.baseline],
            self.baseline_peak_bytes,
        )
        # (n, K): the knob priors a tuner of this field starts from, as columns that fade
        self.knob_prior_names, self.knob_prior_parts = knob_priors(self)
        self.measured = (
            self.measured_log_speed(self.candidates)
            if self.measured_log_speed
            else np.zeros(len(self.candidates))
        )
        n = len(self.candidates)
        self.bank_parts = (
            np.asarray(self.bank_log_speed(self.candidates), dtype=float).reshape(n, -1)
            if self.bank_log_speed
            else np.zeros((n, 0))
        )
        self.bank_names = tuple(getattr(self.bank_log_speed, "names", ())) or tuple(
            f"part{j}" for j in range(self.bank_parts.shape[1])
        )

    def free_key(self, config: Config) -> ConfigKey:
        """A config's identity over the space's free dimensions (the knobs it varies, less the
        derived ones) and its patches: what a searcher that sets each free knob (and each
        patch) independently proposes. A knob the space does not vary is no part of it."""
        free = [d.name for d in self.space.dims if d.name not in self.derived]
        return config_key(config.knob_dict, config.patches, dims=free)

    def by_free_key(self) -> dict[ConfigKey, Config]:
        """Each candidate by its free knobs and patches."""
        if not hasattr(self, "_by_free"):
            self._by_free = {self.free_key(c): c for c in self.candidates}
        return self._by_free

    def analytic_fits(self) -> np.ndarray:
        """Per candidate, whether the analytic memory estimate says it fits the capacity (all
        True without an estimate or a capacity): the prefilter any searcher may use."""
        if self.offsets is None or self.offset_total is None or not self.capacity_bytes:
            return np.ones(len(self.candidates), dtype=bool)
        fits: np.ndarray = self.offset_total <= self._fit_limit()
        return fits

    def _fit_limit(self) -> float:
        """The log peak an estimate may reach and be taken to fit: the capacity less
        ``ANALYTIC_MARGIN``, or — where the baseline's peak was measured within the capacity —
        at least that peak: what the baseline measurably used at this capacity fits (the
        calibrated estimate of the baseline is its measured peak)."""
        assert self.capacity_bytes
        limit = math.log(self.capacity_bytes) - ANALYTIC_MARGIN
        measured = self.baseline_peak_bytes
        if measured and measured <= self.capacity_bytes:
            limit = max(limit, math.log(measured))
        return limit

    def seed_fits(self) -> np.ndarray:
        """``analytic_fits``, except for a bank seed with a measured peak ratio when this run's
        baseline peak is measured: there the ratio times that peak decides (see
        ``start_points``)."""
        fits = self.analytic_fits()
        if not self.capacity_bytes or not self.baseline_peak_bytes:
            return fits
        limit = self._fit_limit()
        base = math.log(self.baseline_peak_bytes)
        for c, log_ratio in self.bank_peak.items():
            if c in self.index:
                fits[self.index[c]] = base + log_ratio <= limit
        return fits

    def prior_pick(self) -> Config | None:
        """The candidate the priors expect fastest (the catalog's ratios and what the Doctor
        measured; not the bank's prior, whose own picks are its seeds — two starts from two
        sources, not one) among those the analytic estimate says fit and the Doctor did not measure
        slow; None without a prior. What a user of any tool could enqueue first. Of those the
        priors rank alike, the one nearest the baseline: a knob no prior speaks of keeps its
        baseline value (a change there is a guess, which the space-filling start explores)."""
        return self._pick_and_claim()[0]

    def _pick_and_claim(self) -> tuple[Config | None, float]:
        """The priors' pick and the log speed-up they claim for it (None and -inf without
        one)."""
        prior = self.prior_log_ratio()
        if prior is None:
            return None, -math.inf
        ok = self.analytic_fits() & (self.measured <= math.log(MEASURED_SLOW))
        ok &= self.within_known_micro_batch()
        if not ok.any():
            return None, -math.inf
        prior = np.where(ok, prior, np.inf)
        best = np.flatnonzero(prior <= prior.min() + PRIOR_TIE)
        pick = min((self.candidates[i] for i in best), key=lambda c: distance(c, self.baseline))
        return pick, -float(prior[self.index[pick]])

    @property
    def memory_unestimated(self) -> bool:
        """Whether a capacity binds and no memory estimate speaks to it (a drafted script: no
        formula): then only the baseline's micro-batch is known to fit."""
        return self.offsets is None and bool(self.capacity_bytes)

    def within_known_micro_batch(self) -> np.ndarray:
        """Per candidate, whether its micro-batch is one this run knows to fit before any
        trial: every one where a memory estimate speaks (or no capacity binds), else those at
        or under the baseline's, the one micro-batch measured (``KNOWN_MICRO_BATCH_PICK``)."""
        mb = self.savers.micro_batch
        if not KNOWN_MICRO_BATCH_PICK or mb is None or not self.memory_unestimated:
            return np.ones(len(self.candidates), dtype=bool)
        base = float(self.baseline.knob_dict[mb])
        return np.array([float(c.knob_dict.get(mb, base)) <= base for c in self.candidates])

    def prior_log_ratio(self) -> np.ndarray | None:
        """Per candidate, the log step-time ratio the priors claim: what the Doctor measured
        plus the catalog's ratios and the knob priors (``knob_priors``; not the bank's); None
        without any."""
        if (
            self.prior_log_speed is None
            and not self.measured.any()
            and not self.knob_prior_parts.any()
        ):
            return None
        claimed: np.ndarray = (
            self.measured
            + (self.prior_log_speed(self.candidates) if self.prior_log_speed else 0.0)
            + self.knob_prior_parts.sum(axis=1)
        )
        return claimed

    def start_points(self) -> list[Config]:
        """The baseline, the seeds (the Doctor's, the bank's) and the priors' pick: what every
        searcher is given to run first. A seed with other knobs than the baseline's that does
        not fit this capacity is left out (it stays a candidate): a config that ran on another
        host, or at another capacity, is no evidence that it fits here — a bank seed from a
        host with more memory per rank would otherwise spend an early trial on an OOM, and the
        censored memory model would then shy away from its whole neighbourhood. Whether it
        fits is the analytic estimate's word, or, for a bank seed whose peak ratio to its
        baseline was measured (``bank_peak``) on a run whose baseline peak was measured here,
        that ratio times this baseline's peak: a measurement overrules an estimate (an
        estimate 16% above the measured peak dropped a seed that fit). A seed on the
        baseline's knobs (a patch) is kept: the baseline runs anyway. A bank seed that this
        host's own measurement (the Doctor's calibration: bf16 where it is emulated) says is
        slower than the baseline by more than the bank claims it gains is left out too: the
        bank's claim is judged before a trial is spent on it. A bank seed expected to gain
        less here than the priors claim for their pick comes after the pick: two sources'
        claims, the larger first."""
        pick, claim = self._pick_and_claim()
        fits = self.seed_fits()
        seeds = [
            s
            for s in self.seeds
            if s in self.index
            and (fits[self.index[s]] or s.same_knobs(self.baseline))
            and not (s in self.bank_gain and self.measured[self.index[s]] > self.bank_gain[s])
        ]
        if pick is None:
            return list(dict.fromkeys([self.baseline] + seeds))
        later = [s for s in seeds if s in self.bank_gain and self.bank_gain[s] <= claim]
        first = [s for s in seeds if s not in later]
        return list(dict.fromkeys([self.baseline] + first + [pick] + later))

    def bank_testable(self) -> list[int]:
        """The bank's prior columns whose claim this host's trials could contradict: those
        that set two candidates apart by at least one run-to-run sd (``noise_var_log``). A
        smaller claim cannot be refuted by any one trial, yet still tips the choice between
        configs the models rank alike — towards what held elsewhere, or, from a host where
        the opposite held, away from what holds here — so it is left out; the bank's seeds
        still carry what it measured."""
        least = math.sqrt(max(self.noise_var_log, 0.0))
        return [
            j
            for j in range(self.bank_parts.shape[1])
            if self.bank_parts[:, j].any() and np.ptp(self.bank_parts[:, j]) >= least
        ]

    def bank_contradicted(self, history: list[tuple[Config, Outcome]]) -> Config | None:
        """The first bank seed that did not hold here, or None: one that ran out of memory, was
        cut short as slow, failed, or ran no faster than the baseline measured in the same
        search (the median of its trials so far; the rule the report's "held" uses). A seed is
        the bank's most confident claim for this host; once one is refuted, the negative-
        transfer guard stops trusting the rest — its other seeds and its time prior."""
        if not self.bank_seeds:
            return None
        base = [o.time_s for c, o in history if c == self.baseline and o.status.is_ok()]
        if not base:
            return None
        base_s = float(np.median(base))
        bank = set(self.bank_seeds)
        return next(
            (
                c
                for c, o in history
                if c in bank and c != self.baseline and (not o.status.is_ok() or o.time_s >= base_s)
            ),
            None,
        )

    @property
    def offset_total(self) -> np.ndarray | None:
        """The log analytic peak of each candidate (its offset parts added up)."""
        if self.offsets is None:
            return None
        return self.offsets if self.offsets.ndim == 1 else self.offsets.sum(axis=1)

    def nearest(
        self, target: Config, exclude: set[Config], rng: np.random.Generator
    ) -> Config | None:
        """The candidate that differs from ``target`` in fewest knobs and patches, not excluded
        (ties broken at random): how a peer's proposal lands on a config that can run."""
        best, best_d = [], None
        for c in self.candidates:
            if c in exclude:
                continue
            d = distance(c, target)
            if best_d is None or d < best_d:
                best, best_d = [c], d
            elif d == best_d:
                best.append(c)
        return best[int(rng.integers(len(best)))] if best else None


ANALYTIC_MARGIN = 0.05  # log: an estimate within 5% of the capacity is not trusted to fit
# the Doctor's between-run coefficient of variation past which the host is judged unsteady: a
# tenth between runs of one config is a load change a search could take for a gain (set a priori)
UNSTEADY_CV = 0.10
# the knob prior's claim for a doubled micro-batch at a fixed global batch (set a priori: a
# tenth a doubling; it fades where the trials say otherwise, as a patch's claim does)
MICRO_BATCH_PRIOR_LOG = math.log(0.9)
# and for threads past the cores: half again as slow a doubling past them (set a priori: ranks
# that share cores wait on each other's threads)
OVERSUBSCRIBED_PRIOR_LOG = math.log(1.5)
# and for a precision the host's matmul peaks set apart (set a priori, before any replay of
# it: a tenth, as a doubled micro-batch — a small model's step is not all matmul — once the
# measured peaks differ by the Doctor's own threshold for "faster in bf16")
PRECISION_PRIOR_LOG = math.log(0.9)
PRECISION_PEAK_RATIO = 1.2
# without a memory estimate (a drafted script has no formula) under a capacity, what fits is
# known only at the baseline's micro-batch, the one measured: KNOWN_MICRO_BATCH_PICK keeps the
# priors' pick at or under it, KNOWN_MICRO_BATCH_PRIOR claims no gain for a micro-batch over it
# (the search may still raise it, once its trials say what fits). Chosen 2026-12-07 (issue 65,
# round eight) on the 4 seen tables it changes, the drafted scripts' (16 seeds,
# ``bench/search_variants.py``): mean area 0.345 against 0.738 (the pick alone 0.353; the
# peers under the same start: greedy 0.426, random 0.430, grid 0.574); in round seven the pick,
# the largest micro-batch on one rank, ran out of memory and the censored model then shied
# from every one-rank config, the target among them
KNOWN_MICRO_BATCH_PICK = True
KNOWN_MICRO_BATCH_PRIOR = True
MEASURED_SLOW = 1.5  # a config the Doctor measured this much slower is no start point
PRIOR_TIE = 1e-9  # log ratios this close are one prior (sums of the same catalog ratios)


def knob_priors(problem: Problem) -> tuple[tuple[str, ...], np.ndarray]:
    """The knob priors, a column each over the candidates (log step-time ratio to the
    baseline's value): at a fixed global batch (the accumulation follows the micro-batch), a
    larger micro-batch is faster by ``MICRO_BATCH_PRIOR_LOG`` a doubling — fewer, larger
    steps of the same work, the rule DeepSpeed's autotuner starts from; with the memory
    estimate's prefilter the priors' pick is then the largest micro-batch that fits; without
    an estimate under a capacity, no gain past the baseline's (``KNOWN_MICRO_BATCH_PRIOR``). And
    threads past the host's cores (ranks x threads > cores) slower by
    ``OVERSUBSCRIBED_PRIOR_LOG`` a doubling past them. And a precision whose matmul peak this
    host measured faster (slower) than the baseline's by ``PRECISION_PEAK_RATIO`` is faster
    (slower) by ``PRECISION_PRIOR_LOG`` (``precision_log_speed``). No column where the space
    does not vary the knob (or the cores, or the peaks, are unknown)."""
    names, columns = [], []
    mb, varied = problem.savers.micro_batch, {d.name for d in problem.space.dims}
    if mb is not None and problem.savers.follows and mb in varied:
        base = float(problem.baseline.knob_dict[mb])
        sizes = [float(c.knob_dict.get(mb, base)) for c in problem.candidates]
        if KNOWN_MICRO_BATCH_PRIOR and problem.memory_unestimated:
            sizes = [min(size, base) for size in sizes]
        names.append(mb)
        columns.append([MICRO_BATCH_PRIOR_LOG * math.log2(size / base) for size in sizes])
    par = problem.parallelism
    if par.threads in varied and par.cores:
        over = [oversubscription(c, par) for c in problem.candidates]
        if any(over):
            names.append(par.threads)
            columns.append([OVERSUBSCRIBED_PRIOR_LOG * o for o in over])
    if problem.precision_log_speed is not None:
        claims = np.asarray(problem.precision_log_speed(problem.candidates), dtype=float)
        if claims.any():
            names.append("precision")
            columns.append(list(claims))
    n = len(problem.candidates)
    return tuple(names), np.array(columns, dtype=float).T.reshape(n, len(names))


def oversubscription(config: Config, par: Parallelism) -> float:
    """How many doublings past the host's cores a config's threads go (``nodes x ranks x
    threads`` over the usable cores, in log2; 0 within them, and where the threads are the
    launcher's default)."""
    knobs = config.knob_dict
    threads = int(knobs.get(par.threads, 0) or 0) if par.threads else 0
    if threads <= 0 or not par.cores:
        return 0.0
    ranks = int(knobs.get(par.ranks, 1) or 1) if par.ranks else 1
    return max(0.0, math.log2(par.nodes * ranks * threads / par.cores))


def calibrated(
    offsets: np.ndarray | None, base_row: int, measured_peak_bytes: float | None
) -> np.ndarray | None:
    """The analytic log peaks moved so that the baseline's is the peak the Doctor measured
    before the first trial (the formula's first part; the patches' ratios stay): a formula
    that misses a constant share of the memory (the runtime, the allocator's slack) misses it
    for every config, and the baseline's measurement scales it. Unchanged without a measured
    peak or a formula."""
    if offsets is None or not measured_peak_bytes or measured_peak_bytes <= 0:
        return offsets
    out = np.array(offsets, dtype=float)
    total = out if out.ndim == 1 else out.sum(axis=1)
    shift = math.log(measured_peak_bytes) - float(total[base_row])
    if out.ndim == 1:
        out += shift
    else:
        out[:, 0] += shift
    return out


def distance(a: Config, b: Config) -> int:
    """How many knobs and patches two configs differ in."""
    ak = a.knob_dict
    return sum(
        k not in ak or canonical_value(ak[k]) != canonical_value(v) for k, v in b.knobs
    ) + len(a.patches ^ b.patches)


def free_change(problem: Problem, a: Config, b: Config) -> str | None:
    """The one free knob (a knob the space varies, not a derived one) or patch in which two
    configs differ; None where they differ in none or in several."""
    ak, bk = a.knob_dict, b.knob_dict
    diff = [
        d.name
        for d in problem.space.dims
        if d.name not in problem.derived
        and canonical_value(ak.get(d.name)) != canonical_value(bk.get(d.name))
    ]
    diff += sorted(a.patches ^ b.patches)
    return diff[0] if len(diff) == 1 else None
