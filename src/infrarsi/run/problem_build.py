"""From a contract's workload to a search problem: the candidate configs, their encoding, the
analytic memory estimate and the priors (patch metadata, the Doctor's findings)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infrarsi.host import usable_threads
from infrarsi.identity import changed_knobs
from infrarsi.proposal import ProposedPatch
from infrarsi.records import DOCTOR_BASELINE_LABEL, BankAdvice, BankSeed, DoctorReport
from infrarsi.run import problem as rules
from infrarsi.run.problem import UNSTEADY_CV, MemorySavers, Parallelism, Problem
from infrarsi.run.space import Config, Space
from infrarsi.workloads import expr, knobs
from infrarsi.workloads.knobs import AssignmentError
from infrarsi.workloads.manifest import Manifest, PatchSpec, Prior

MAX_RANDOM = 3000

ConfigPrior = Callable[[list[Config]], np.ndarray]  # a value (or a row of parts) per config


@dataclass(frozen=True)
class PartsPrior:
    """A prior in parts, one column per knob or patch it speaks of (``names``)."""

    of: ConfigPrior
    names: tuple[str, ...]

    def __call__(self, configs: list[Config]) -> np.ndarray:
        return self.of(configs)


def free_levels(manifest: Manifest, cores: int | None = None) -> dict[str, list[Any]]:
    """The values each knob the search sets may take: derived knobs follow the others; ranks
    and threads stay within this host's cores (more only oversubscribes them)."""
    cores = cores or usable_threads()
    out = {}
    for knob in manifest.knobs:
        if knob.derive is not None and knob.role == "grad_accum":
            continue
        values = list(knob.values) if knob.values else [False, True]
        if knob.role in ("ranks", "threads"):
            values = [v for v in values if float(v) <= cores] or values[:1]
        out[knob.name] = values
    return out


def patch_sets(manifest: Manifest) -> list[frozenset[str]]:
    """Every subset of the catalog without a conflicting pair."""
    ids = [p.id for p in manifest.patches]
    out = []
    for r in range(len(ids) + 1):
        for subset in itertools.combinations(ids, r):
            if not any(set(manifest.patch(p).conflicts) & set(subset) for p in subset):
                out.append(frozenset(subset))
    return out


def candidates(
    manifest: Manifest, scale: str, seed: int = 0, limit: int = MAX_RANDOM
) -> list[Config]:
    """The baseline, its one-change neighbours, the baseline's knobs with each set of patches
    (the priors' pick among them: what the catalog says without a guess at the knobs), and up
    to ``limit`` random valid configs."""
    levels, sets = free_levels(manifest), patch_sets(manifest)
    base = knobs.resolve(manifest, scale, {})
    out = {Config.of(base): None}

    def add(overrides: dict[str, Any], patches: frozenset[str]) -> None:
        try:
            out.setdefault(Config.of(knobs.resolve(manifest, scale, overrides), patches), None)
        except AssignmentError:
            pass

    free = {k: base[k] for k in levels}
    for name, values in levels.items():
        for value in values:
            add({**free, name: value}, frozenset())
    for patches in sets[:limit]:  # smallest sets first
        add(free, patches)
    rng = np.random.default_rng(seed)
    total = math.prod(len(v) for v in levels.values()) * len(sets)
    for _ in range(min(limit, total) * 3):
        if len(out) >= limit:
            break
        pick = {k: v[int(rng.integers(len(v)))] for k, v in levels.items()}
        add(pick, sets[int(rng.integers(len(sets)))])
    return list(out)


def analytic(manifest: Manifest, scale: str) -> ConfigPrior | None:
    """The log analytic per-rank peak in two parts per config — the manifest's formula, and the
    sum of the patches' log prior memory ratios — or None without a formula."""
    if manifest.memory is None:
        return None
    params = manifest.scale(scale).params
    ratio = {p.id: math.log(p.prior.peak_mem_ratio) for p in manifest.patches}
    formula = manifest.memory.per_rank_bytes

    def estimate(configs: list[Config]) -> np.ndarray:
        return np.array(
            [
                [
                    math.log(
                        max(
                            1.0,
                            float(expr.evaluate(formula, {**params, **c.knob_dict})),
                        )
                    ),
                    sum(ratio.get(p, 0.0) for p in c.patches),
                ]
                for c in configs
            ]
        )

    return estimate


def patch_speeds(manifest: Manifest) -> dict[str, float]:
    """The log step-time ratio the patch catalog claims for each patch."""
    return {p.id: math.log(p.prior.step_time_ratio) for p in manifest.patches}


def measured_effects(
    manifest: Manifest, scale: str, report: DoctorReport | None
) -> list[tuple[dict[str, Any], float]]:
    """What the Doctor's calibration runs measured on this host: for each run that changed
    some free knobs (bf16, another micro-batch or rank count), those knob values and the log
    ratio of its ranked time per step to the baseline runs' median. Derived knobs (the
    accumulation steps) follow and are left out."""
    if report is None:
        return []
    base = [
        t.ranked_time_per_step_s
        for t in report.trials
        if t.label.startswith(DOCTOR_BASELINE_LABEL) and t.ranked_time_per_step_s
    ]
    if not base:
        return []
    ref = float(np.median(np.log(base)))
    defaults = knobs.resolve(manifest, scale, {})
    derived = {k.name for k in manifest.knobs if k.derive is not None}
    out = []
    for t in report.trials:
        if not t.label.startswith("calibration") or not t.ranked_time_per_step_s:
            continue
        free = {k: v for k, v in t.knobs.items() if k not in derived}
        changed = changed_knobs(free, defaults)
        if changed:
            out.append((changed, math.log(t.ranked_time_per_step_s) - ref))
    return out


def measured_prior(
    effects: Sequence[tuple[dict[str, Any], float]],
) -> ConfigPrior | None:
    """The log step-time ratio the Doctor measured for the knob values its calibration runs
    set (``measured_effects``), added up for each config that holds those values (None when
    nothing was measured): a host where bf16 is 100x slower says so before any trial."""
    if not effects:
        return None

    def prior(configs: list[Config]) -> np.ndarray:
        out = np.zeros(len(configs))
        for i, c in enumerate(configs):
            out[i] = sum(
                effect for changed, effect in effects if not changed_knobs(changed, c.knob_dict)
            )
        return out

    return prior


def precision_prior(
    manifest: Manifest,
    baseline: Config,
    peak_flops: dict[str, float] | None,
    measured: Sequence[tuple[dict[str, Any], float]] = (),
) -> ConfigPrior | None:
    """Each config's log step-time claim for its compute precision against the baseline's,
    from the host's measured matmul peaks (``PRECISION_PRIOR_LOG`` faster where its
    precision's peak is ``PRECISION_PEAK_RATIO`` over the baseline's, as much slower where
    under): what a practitioner knows of bf16 on this hardware before a trial. None without a
    precision knob or the peaks, and where the Doctor's calibration measured a change of
    precision (``measured``, ``measured_effects``: a measurement, not a claim)."""
    names = set(manifest.knobs_with_role("precision"))
    fp32 = (peak_flops or {}).get("fp32")
    if not names or not fp32 or not peak_flops:
        return None
    if any(names & set(changed) for changed, _ in measured):
        return None
    peaks = dict(peak_flops)

    def claim(config: Config) -> float:
        typed = {k: manifest.knob(k).coerce(v) for k, v in config.knob_dict.items() if k in names}
        precision = knobs.precision_of(manifest, typed)
        ratio = (peaks.get(precision) or fp32) / fp32
        if ratio >= rules.PRECISION_PEAK_RATIO:  # read here: the variant study sets them
            return rules.PRECISION_PRIOR_LOG
        return -rules.PRECISION_PRIOR_LOG if ratio <= 1 / rules.PRECISION_PEAK_RATIO else 0.0

    base = claim(baseline)

    def prior(configs: list[Config]) -> np.ndarray:
        return np.array([claim(c) - base for c in configs])

    return prior


def host_priors(
    manifest: Manifest, scale: str, report: DoctorReport | None, baseline: Config
) -> tuple[ConfigPrior | None, ConfigPrior | None]:
    """What this host said before the search: the Doctor's measured effects
    (``measured_prior``) and, where it measured no change of precision, its matmul peaks'
    claim for one (``precision_prior``)."""
    peaks = report.hardware.get("peak_flops") if report is not None else None
    effects = measured_effects(manifest, scale, report)
    return measured_prior(effects), precision_prior(manifest, baseline, peaks, effects)


def savers(manifest: Manifest) -> MemorySavers:
    """The knobs and patches that save memory, by role."""

    def first(role: str) -> str | None:
        return next(iter(manifest.knobs_with_role(role)), None)

    return MemorySavers(
        checkpointing=first("activation_checkpointing"),
        micro_batch=first("micro_batch"),
        patches=tuple(manifest.patches_with_role("memory_saver")),
        follows=tuple(manifest.knobs_with_role("grad_accum")),
    )


def parallelism(manifest: Manifest, report: DoctorReport | None) -> Parallelism:
    """The knobs that set the ranks and their threads, the nodes of the launch (all on this
    host, as a local run starts them) and the host's usable cores as the Doctor saw them."""
    cores = (report.hardware.get("facts") or {}).get("cores") if report is not None else None
    return Parallelism(
        ranks=next(iter(manifest.knobs_with_role("ranks")), None),
        threads=next(iter(manifest.knobs_with_role("threads")), None),
        nodes=manifest.launch.nodes or 1,
        cores=int(cores) if isinstance(cores, int | float) and cores > 0 else None,
    )


def doctor_seeds(manifest: Manifest, scale: str, report: DoctorReport | None) -> list[Config]:
    """Configs the Doctor's findings point at: the baseline plus each finding's patches."""
    if not report:
        return []
    base = knobs.resolve(manifest, scale, {})
    ids = {p.id for p in manifest.patches}
    seeds = []
    for finding in report.diagnosis:
        patches = frozenset(s for s in finding.suggests if s in ids)
        if patches and not any(set(manifest.patch(p).conflicts) & patches for p in patches):
            seeds.append(Config.of(base, patches))
    return list(dict.fromkeys(seeds))


def bank_seeds(manifest: Manifest, scale: str, advice: BankAdvice | None) -> dict[Config, BankSeed]:
    """The bank's seeds as configs of this workload, in the bank's order (the first seed,
    where two resolve to one config): their free knobs resolved here (the derived ones
    follow); a seed with a knob value or a patch this workload does not have is left out."""
    if advice is None:
        return {}
    derived = {k.name for k in manifest.knobs if k.derive is not None}
    names = {k.name for k in manifest.knobs}
    ids = {p.id for p in manifest.patches}
    out: dict[Config, BankSeed] = {}
    for s in advice.seeds:
        if not set(s.patches) <= ids:
            continue
        free = {k: v for k, v in s.knobs.items() if k in names and k not in derived}
        try:
            config = Config.of(knobs.resolve(manifest, scale, free), frozenset(s.patches))
        except AssignmentError:
            continue
        out.setdefault(config, s)
    return out


def bank_gains(seeds: dict[Config, BankSeed]) -> dict[Config, float]:
    """Each bank seed's expected log speed-up here, as the bank advised it."""
    return {c: math.log(s.expected_speedup) for c, s in seeds.items()}


def bank_peaks(seeds: dict[Config, BankSeed]) -> dict[Config, float]:
    """Each bank seed's measured log peak ratio to its source baseline, where it has one."""
    return {c: math.log(s.peak_ratio) for c, s in seeds.items() if s.peak_ratio}


def bank_time_prior(advice: BankAdvice | None, baseline: Config) -> PartsPrior | None:
    """The bank's prior log step-time ratio to the baseline per config, in parts — one column
    per knob and patch it speaks of — and the parts' names (None without one)."""
    if advice is None or not advice.time_coefficients:
        return None
    base = baseline.knob_dict
    names = sorted(
        {f if f.startswith("patch:") else f.split("=", 1)[0] for f in advice.time_coefficients}
    )

    def prior(cs: list[Config]) -> np.ndarray:
        out = np.zeros((len(cs), len(names)))
        for i, c in enumerate(cs):
            parts = advice.log_speed_parts(c.knob_dict, c.patches, base)
            out[i] = [parts.get(n, 0.0) for n in names]
        return out

    return PartsPrior(prior, tuple(names))


def bank_memory_prior(
    advice: BankAdvice | None, baseline: Config, report: DoctorReport | None
) -> ConfigPrior | None:
    """Where the manifest has no memory formula: the Doctor's measured baseline peak times the
    bank's prior peak ratio to the baseline, per config, as the memory model's offset (None
    without a bank, a measured peak or memory experiences)."""
    peak = measured_peak(report)
    if advice is None or not advice.memory_coefficients or not peak:
        return None
    base, log_base = baseline.knob_dict, math.log(peak)
    return lambda cs: np.array(
        [log_base + advice.log_peak(c.knob_dict, c.patches, base) for c in cs]
    )


def measured_peak(report: DoctorReport | None) -> float | None:
    """The baseline's per-rank peak the Doctor measured here (the largest of its runs), or
    None."""
    peaks = [p for p in (report.peak_mem_bytes if report else []) if p]
    return float(max(peaks)) if peaks else None


def with_proposed(
    manifest: Manifest, proposed: list[ProposedPatch], run_dir: Path, catalog: bool = True
) -> Manifest:
    """The manifest as the search sees it: its catalog (or none, ``catalog=False``) and the
    proposed patches as entries whose id is their path in the run directory and whose prior
    is their stated expectation (faded by the models as any catalog prior once measured).
    A view for building the problem only: trials resolve a proposed patch as a diff file."""
    extra = [
        PatchSpec.model_construct(  # ids are paths, outside the catalog's id pattern
            id=p.patch_id,
            file=str(Path(run_dir).resolve() / p.patch_id),
            title=p.title or p.patch_id,
            category="kernel",
            roles=[],
            conflicts=[],
            prior=Prior(
                step_time_ratio=p.expectation.step_time_ratio,
                peak_mem_ratio=p.expectation.peak_mem_ratio,
            ),
        )
        for p in proposed
    ]
    if not extra and catalog:
        return manifest
    return manifest.model_copy(
        update={"patches": (list(manifest.patches) if catalog else []) + extra}
    )


def build_problem(
    manifest: Manifest,
    scale: str,
    capacity_bytes: int | None,
    report: DoctorReport | None = None,
    min_effect: float | None = None,
    seed: int = 0,
    bank: BankAdvice | None = None,
    first: tuple[frozenset[str], ...] = (),
) -> Problem:
    """The search problem of a workload at a scale under a per-rank capacity; ``bank``: the
    experience bank's advice (seeds, and priors for the time and memory models); ``first``:
    patch sets to try on the baseline's knobs before any other seed (a patch proposed during
    the run: measured soon, so its proposer hears how it did)."""
    from infrarsi.run.compat import incompatible_pairs

    clashes = incompatible_pairs(manifest)
    configs = [
        c
        for c in candidates(manifest, scale, seed)
        if not any(pair <= c.patches for pair in clashes)
    ]
    banked = {
        c: s
        for c, s in bank_seeds(manifest, scale, bank).items()
        if not any(pair <= c.patches for pair in clashes)
    }
    from_bank = list(banked)
    configs += [c for c in from_bank if c not in set(configs)]
    levels = {k.name: sorted({c.knob_dict[k.name] for c in configs}) for k in manifest.knobs}
    space = Space.from_manifest(manifest, levels)
    seeds = [s for s in doctor_seeds(manifest, scale, report) if s in set(configs)]
    proposed = [Config.of(configs[0].knob_dict, patches) for patches in first]
    configs += [c for c in proposed if c not in set(configs)]
    seeds = list(dict.fromkeys(proposed + from_bank + seeds))
    cv = report.noise.cv_between if report is not None else None
    measured, precision = host_priors(manifest, scale, report, configs[0])
    return Problem(
        configs,
        space,
        configs[0],
        capacity_bytes=capacity_bytes,
        analytic_log_peak=analytic(manifest, scale) or bank_memory_prior(bank, configs[0], report),
        patch_log_speed=patch_speeds(manifest),
        seeds=seeds,
        bank_seeds=from_bank,
        bank_gain=bank_gains(banked),
        bank_peak=bank_peaks(banked),
        baseline_peak_bytes=measured_peak(report),
        measured_log_speed=measured,
        bank_log_speed=bank_time_prior(bank, configs[0]),
        precision_log_speed=precision,
        derived=tuple(k.name for k in manifest.knobs if k.derive is not None),
        savers=savers(manifest),
        parallelism=parallelism(manifest, report),
        min_effect=min_effect or 0.02,
        noise_var_log=run_to_run_var(cv),
        unsteady=cv is None or cv > UNSTEADY_CV,
    )


def run_to_run_var(cv: float | None) -> float:
    """The variance of log time between repeated runs of one config, from a coefficient of
    variation (the Doctor's between-run cv); a small floor when none was measured."""
    return math.log1p(cv * cv) if cv else DEFAULT_RUN_VAR_LOG


DEFAULT_RUN_VAR_LOG = math.log1p(0.03**2)  # 3%: a quiet machine
