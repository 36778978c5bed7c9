"""Signatures, distances and the bank's advice (pure functions), and the negative-transfer
guard: the search keeps a bank's prior that this host's trials agree with and drops one they
contradict."""

import itertools
import math
import zlib
from pathlib import Path

import numpy as np
import pytest
from helpers import HOST, WORKLOAD, experience

from infrarsi.bank.signatures import (
    UNKNOWN_GAP,
    hardware_distance,
    hardware_signature,
    similarity,
    workload_distance,
    workload_signature,
)
from infrarsi.bank.transfer import advise, ridge
from infrarsi.records import BankAdvice, BankSeed
from infrarsi.run.fitting import BANK
from infrarsi.run.infrarsi_searcher import InfraRSISearcher
from infrarsi.run.problem import Outcome, Problem
from infrarsi.run.problem_build import build_problem
from infrarsi.run.space import Config, Space
from infrarsi.workloads import find, load_manifest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_the_same_host_and_workload_are_at_distance_zero_and_similarity_one():
    assert hardware_distance(HOST, dict(HOST)) == 0.0
    assert similarity(HOST, WORKLOAD, HOST, WORKLOAD) == 1.0


def test_distance_grows_with_what_differs_and_unknown_fields_cost_a_fixed_gap():
    one_core = {**HOST, "cores": 1}
    gpu = {**HOST, "device_type": "cuda", "device": "H200", "peak_flops_fp32": 6e13}
    assert hardware_distance(HOST, one_core) == pytest.approx(math.log(2))
    assert hardware_distance(HOST, gpu) > 3 + hardware_distance(HOST, one_core)
    no_bw = {k: v for k, v in HOST.items() if k != "memory_bandwidth_bytes_per_s"}
    assert hardware_distance(HOST, no_bw) == pytest.approx(0.5 * UNKNOWN_GAP)
    moe = {**WORKLOAD, "family": "moe", "experts": 8}
    assert workload_distance(WORKLOAD, moe) > 3
    assert workload_distance(WORKLOAD, {**WORKLOAD, "parameters": 2 * 2.5e6}) == pytest.approx(
        math.log(2)
    )


def test_signatures_read_the_probe_and_the_manifest_under_their_usual_names():
    hw = hardware_signature(
        {
            "fingerprint": "f",
            "facts": {
                "device_type": "cpu",
                "cpu": "X",
                "cores": 2,
                "isa": ["avx2"],
                "torch": "2.13.0+cpu",
            },
            "peak_flops": {"fp32": 1e11, "bf16": 1e9},
        },
        2**30,
        2,
        1,
    )
    assert hw["bf16_over_fp32"] == pytest.approx(0.01) and hw["torch"] == "2.13"
    assert hw["capacity_per_rank_bytes"] == 2**30 and hw["device_count"] == 1
    dense = workload_signature(find("dense-1node"), "bench", {"nproc": 2})
    moe = workload_signature(find("moe-1node"), "bench", {"nproc": 2})
    assert dense["family"] == "dense" and moe["family"] == "moe" and moe["experts"] == 8
    assert dense["layers"] == 2 and dense["width"] == 128 and dense["seq_len"] == 256
    assert dense["world_size"] == 2 and dense["global_batch"] == 8
    assert dense["parameters"] > 1e5  # from the manifest's FLOPs per token
    foreign = load_manifest(FIXTURES / "foreign")
    sig = workload_signature(foreign, "tiny", {})
    assert sig["family"] == "dense" and sig["name"] == foreign.name


def test_ridge_keeps_half_of_an_effect_seen_once_on_the_same_host():
    coef = ridge([(["a=1"], 0.0, 1.0), (["a=2"], -0.4, 1.0)])
    assert coef["a=2"] == pytest.approx(-0.2)
    far = ridge([(["a=1"], 0.0, 0.05), (["a=2"], -0.4, 0.05)])
    assert abs(far["a=2"]) < 0.05 * 0.4 + 1e-9  # a distant past says little


def _bank_rows(hardware=HOST, run="run-1"):
    base = {"micro_batch": 2, "precision": "fp32"}
    return [
        experience("b", base, 1.0, run=run, hardware=hardware, stage="doctor"),
        experience("bf16", {**base, "precision": "bf16"}, 0.3, run=run, hardware=hardware),
        experience("mb4", {**base, "micro_batch": 4}, 1.35, run=run, hardware=hardware),
        experience(
            "mb4b", {**base, "micro_batch": 4}, 1.25, run=run, hardware=hardware, stage="apply"
        ),
        experience(
            "mb8",
            {**base, "micro_batch": 8},
            None,
            run=run,
            hardware=hardware,
            status="oom",
            censored=True,
        ),
    ]


def test_advice_ranks_seeds_by_expected_speedup_and_never_seeds_what_ran_out_of_memory():
    advice = advise(_bank_rows(), HOST, WORKLOAD, bank_url="sqlite://")
    base = {"micro_batch": 2, "precision": "fp32"}
    assert advice.used == 5
    assert advice.log_speed({**base, "precision": "bf16"}, [], base) > 0.3  # slower
    assert advice.log_speed({**base, "micro_batch": 4}, [], base) < -0.1  # faster
    assert [s.knobs["micro_batch"] for s in advice.seeds] == [4]
    (seed,) = advice.seeds
    assert seed.expected_speedup == pytest.approx(math.sqrt(1.35 * 1.25))
    assert seed.similarity == 1.0 and {s["stage"] for s in seed.sources} == {"run", "apply"}


def test_a_distant_host_weighs_less_and_one_too_far_weighs_nothing():
    base = {"micro_batch": 2, "precision": "fp32"}
    near = advise(_bank_rows(), HOST, WORKLOAD, bank_url="sqlite://")
    slower_host = {**HOST, "cores": 1, "peak_flops_fp32": 1.5e11}
    mid = advise(_bank_rows(slower_host), HOST, WORKLOAD, bank_url="sqlite://")
    gpu = {
        **HOST,
        "device_type": "cuda",
        "device": "H200",
        "peak_flops_fp32": 6e13,
        "bf16_over_fp32": 15.0,
        "cores": 64,
    }
    far = advise(_bank_rows(gpu), HOST, WORKLOAD, bank_url="sqlite://")
    mb4 = {**base, "micro_batch": 4}
    sim = similarity(slower_host, WORKLOAD, HOST, WORKLOAD)
    assert 0 < abs(mid.log_speed(mb4, [], base)) < sim * abs(near.log_speed(mb4, [], base))
    (seed,) = mid.seeds  # its expected speed-up carries as far as its host is similar
    assert seed.expected_speedup == pytest.approx(math.sqrt(1.35 * 1.25) ** sim)
    assert far.used == 0 and far.time_coefficients == {} and far.seeds == []
    assert "similar enough" in far.notes[0]


def test_the_bank_seeds_a_run_of_the_same_workload_first():
    manifest = find("dense-1node")
    seed = BankSeed(
        knobs={"nproc": 1, "micro_batch": 4, "precision": "fp32", "grad_accum": 99},
        patches=["sdpa_attention"],
        expected_speedup=2.0,
        similarity=1.0,
        experiences=2,
        sources=[],
    )
    alien = BankSeed(
        knobs={"nproc": 1},
        patches=["not_in_this_catalog"],
        expected_speedup=2.0,
        similarity=1.0,
        experiences=1,
        sources=[],
    )
    advice = BankAdvice(
        bank_url="sqlite://", hardware={}, workload={}, experiences=3, used=3, seeds=[alien, seed]
    )
    problem = build_problem(manifest, "tiny", None, bank=advice)
    (config,) = [s for s in problem.seeds if "sdpa_attention" in s.patches]
    assert config.knob_dict["micro_batch"] == 4 and config.knob_dict["grad_accum"] != 99
    assert not any("not_in_this_catalog" in s.patches for s in problem.seeds)
    searcher = InfraRSISearcher(problem, seed=0)
    first = [searcher.ask()]
    searcher.tell(first[0], Outcome("ok", ranked_time_per_step_s=1.0, peak_bytes=1e8, cost_s=5.0))
    assert first[0] == problem.baseline and searcher.ask() == config


def _small_space() -> tuple[list[Config], Space]:
    """Micro-batch x threads x one patch: the guard tests' candidates and space."""
    configs = [
        Config.of({"micro_batch": mb, "threads": t}, p)
        for mb, t in itertools.product([1, 2, 4, 8], [1, 2])
        for p in ([], ["fast"])
    ]
    return configs, Space.from_levels({"micro_batch": [1, 2, 4, 8], "threads": [1, 2]}, ["fast"])


def _guard_problem(bank_claim):
    """A small space; the bank claims ``bank_claim(config)`` (a log ratio) for each config."""
    configs, space = _small_space()
    return Problem(
        configs,
        space,
        configs[0],
        bank_log_speed=lambda cs: np.array([bank_claim(c) for c in cs]),
        noise_var_log=0.03**2,
    )


def _truth(config):
    k = config.knob_dict
    return 1.0 * (1 - 0.12 * math.log2(k["micro_batch"])) * (0.7 if k["threads"] == 2 else 1.0)


def _measured(config, visit):
    """The truth with 3% run-to-run noise (seeded by the config and the visit)."""
    rng = np.random.default_rng([zlib.crc32(config.describe().encode()), visit])
    return _truth(config) * math.exp(rng.normal(0, 0.03))


@pytest.mark.parametrize("sign, kept", [(1.0, True), (-1.0, False)])
def test_the_banks_prior_is_kept_while_trials_agree_and_dropped_once_they_contradict(sign, kept):
    claim = lambda c: (
        sign
        * math.log(
            _truth(c)
            / _truth(
                Config.of(  # noqa: E731
                    {"micro_batch": 1, "threads": 1}
                )
            )
        )
    )
    searcher = InfraRSISearcher(_guard_problem(claim), seed=0)
    for visit in range(8):
        config = searcher.ask()
        searcher.tell(
            config,
            Outcome(
                "ok", ranked_time_per_step_s=_measured(config, visit), peak_bytes=1e8, cost_s=5.0
            ),
        )
    searcher.recommend()  # refits on every trial
    bank = {k: v for k, v in searcher.patch_weights.items() if k.startswith(BANK + ":")}
    assert bank and all(v == (1.0 if kept else 0.0) for v in bank.values()), bank


def _per_knob_problem(sign: float, scale: float = 1.0, noise_var_log: float = 0.03**2):
    """``_guard_problem``'s space with the bank's claim split by knob, as a real bank's prior
    is (one column per knob): ``sign`` times the truth's effects, times ``scale``."""
    configs, space = _small_space()

    def parts(cs):
        return (
            scale
            * sign
            * np.array(
                [
                    [
                        math.log(1 - 0.12 * math.log2(c.knob_dict["micro_batch"])),
                        math.log(0.7) if c.knob_dict["threads"] == 2 else 0.0,
                    ]
                    for c in cs
                ]
            )
        )

    parts.names = ("micro_batch", "threads")
    return Problem(configs, space, configs[0], bank_log_speed=parts, noise_var_log=noise_var_log)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_bank_split_by_knob_that_contradicts_this_host_loses_its_say_within_four_trials(
    sign, seed
):
    """One column per knob, each alone too weakly tested to drop on the marginal likelihood
    (without the whole-bank weight the turned-round bank kept weight 1 on both columns for 6-8
    trials); the bank as a whole is read in four (``_bank_weight``), and a bank that agrees
    keeps its say."""
    searcher = InfraRSISearcher(_per_knob_problem(sign), seed=seed)
    for visit in range(4):
        config = searcher.ask()
        searcher.tell(
            config,
            Outcome(
                "ok", ranked_time_per_step_s=_measured(config, visit), peak_bytes=1e8, cost_s=5.0
            ),
        )
    searcher._fit()
    bank = {k: v for k, v in searcher.patch_weights.items() if k.startswith(BANK + ":")}
    assert len(bank) == 2
    assert all((v > 0.9) if sign > 0 else (v < 0.05) for v in bank.values()), bank


def test_a_bank_claim_smaller_than_one_runs_noise_is_left_out_of_the_prior():
    """A claim that sets no two configs apart by one run-to-run sd cannot be refuted by a
    trial, yet tips near-ties (from a host where the opposite held, away from what holds
    here): only the columns a trial could contradict enter the model."""
    strong = _per_knob_problem(1.0)
    assert strong.bank_testable() == [0, 1]
    # micro_batch's claim spans 0.45 in log time and clears a 0.4 sd; threads' (log 0.7:
    # 0.36) does not
    assert _per_knob_problem(1.0, noise_var_log=0.4**2).bank_testable() == [0]
    faint = _per_knob_problem(-1.0, scale=0.05)  # every claim under 0.03
    assert faint.bank_testable() == []
    searcher = InfraRSISearcher(faint, seed=0)
    config = searcher.ask()
    searcher.tell(config, Outcome("ok", ranked_time_per_step_s=1.0, peak_bytes=1e8, cost_s=5.0))
    for visit in range(3):
        config = searcher.ask()
        searcher.tell(
            config,
            Outcome(
                "ok", ranked_time_per_step_s=_measured(config, visit), peak_bytes=1e8, cost_s=5.0
            ),
        )
    searcher._fit()
    assert not any(k.startswith(BANK + ":") for k in searcher.patch_weights)


@pytest.mark.parametrize("name", ["infrarsi", "random"])
@pytest.mark.parametrize("first_holds", [True, False])
def test_a_bank_seed_that_does_not_hold_ends_the_banks_say(name, first_holds):
    """The bank's first seed measured here slower than the baseline: its second seed is not
    tried as a start point and (InfraRSI) its time prior leaves the model at once, not after
    ``BANK_FADE_MIN`` trials; a seed that held keeps both."""
    from infrarsi.run import searchers as registry

    claim = lambda c: -0.3 if c.knob_dict["threads"] == 2 else 0.0  # noqa: E731
    problem = _guard_problem(claim)
    one, two = [c for c in problem.candidates if c.knob_dict["threads"] == 2][:2]
    problem = Problem(
        problem.candidates,
        problem.space,
        problem.baseline,
        seeds=[one, two],
        bank_seeds=[one, two],
        bank_log_speed=problem.bank_log_speed,
        noise_var_log=problem.noise_var_log,
    )
    searcher = registry.make(name, problem, 0)
    asked = []
    for _ in range(3):
        config = searcher.ask()
        asked.append(config)
        slower = config == one and not first_holds
        searcher.tell(
            config,
            Outcome(
                "ok",
                ranked_time_per_step_s=1.3
                if slower
                else (1.0 if config == problem.baseline else 0.8),
                peak_bytes=1e8,
                cost_s=5.0,
            ),
        )
    assert asked[:2] == [problem.baseline, one]
    assert (asked[2] == two) is first_holds
    assert (problem.bank_contradicted(searcher.history) == one) is not first_holds
    if name == "infrarsi":
        searcher._fit()
        bank = [k for k in searcher.patch_weights if k.startswith(BANK + ":")]
        assert bool(bank) is first_holds


@pytest.mark.parametrize("expected, before_the_pick", [(2.5, True), (1.05, False)])
def test_a_bank_seed_comes_before_the_priors_pick_only_when_it_claims_more(
    expected, before_the_pick
):
    """Two sources' claims, the larger first: the priors claim ~1.7x for their pick on
    dense-1node (three patches, ~1.39x, and the largest micro-batch); a bank seed expected
    at 2.5x here goes before it, one at 1.05x after it."""
    seed = BankSeed(
        knobs={"nproc": 1, "micro_batch": 4},
        patches=[],
        similarity=0.2,
        expected_speedup=expected,
        experiences=1,
        sources=[],
    )
    advice = BankAdvice(
        bank_url="sqlite://", hardware={}, workload={}, experiences=1, used=1, seeds=[seed]
    )
    problem = build_problem(find("dense-1node"), "tiny", None, bank=advice)
    (config,) = problem.bank_seeds
    assert problem.bank_gain == {config: pytest.approx(math.log(expected))}
    starts = problem.start_points()
    pick = problem.prior_pick()
    assert starts[0] == problem.baseline and set(starts) == {problem.baseline, config, pick}
    assert (starts.index(config) < starts.index(pick)) is before_the_pick


def test_a_configuration_a_check_refused_is_never_a_seed():
    """The search measured micro-batch 4 fast; Apply refused it (``invalid``): no start."""
    base = {"micro_batch": 2, "precision": "fp32"}
    refused = experience("mb4x", {**base, "micro_batch": 4}, 1.3, stage="apply", status="invalid")
    assert [
        s.knobs["micro_batch"] for s in advise(_bank_rows(), HOST, WORKLOAD, bank_url="x").seeds
    ] == [4]
    assert advise(_bank_rows() + [refused], HOST, WORKLOAD, bank_url="x").seeds == []


def test_the_baseline_is_never_a_seed():
    base = {"micro_batch": 2, "precision": "fp32"}
    rows = _bank_rows() + [experience("lucky", base, 1.1)]  # a baseline run that ran fast
    assert any(s.knobs == base for s in advise(rows, HOST, WORKLOAD, bank_url="x").seeds)
    assert not any(
        s.knobs == base for s in advise(rows, HOST, WORKLOAD, bank_url="x", baseline=base).seeds
    )


def test_how_fast_bf16_is_weighs_only_outcomes_that_ran_it():
    """A host with AMX and one that emulates bf16 differ by ~6.5 in log bf16/fp32: an fp32
    outcome of one still tells the other something, a bf16 outcome does not. Read by the
    manifest's roles: a ``--bf16`` switch counts as well as a value naming a 16-bit type."""
    from infrarsi.bank.signatures import low_precision_reader

    emulating = {**HOST, "fingerprint": "hostE", "bf16_over_fp32": 0.01}
    fp32 = {"nproc": 2, "precision": "fp32"}
    bf16 = {"nproc": 2, "precision": "bf16"}
    rows = [
        experience("fp32", fp32, 1.3, hardware=HOST),
        experience("bf16", bf16, 1.6, hardware=HOST),
    ]
    low = low_precision_reader(find("dense-1node"))
    assert low(bf16) and not low(fp32) and not low({"nproc": 2})
    advice = advise(rows, emulating, WORKLOAD, bank_url="sqlite://", low_precision=low)
    assert advice.used == 1  # the bf16 outcome is too far from this host
    assert [s.knobs for s in advice.seeds] == [fp32]
    assert advise(rows, emulating, WORKLOAD, bank_url="sqlite://").used == 0  # every field
    # a baseline that runs bf16 here makes every outcome depend on it
    assert (
        advise(
            rows, emulating, WORKLOAD, bank_url="sqlite://", low_precision=low, baseline=bf16
        ).used
        == 0
    )
    assert similarity(HOST, WORKLOAD, emulating, WORKLOAD, False) == 1.0

    class Switches:  # a user's script with a --bf16 switch and an --amp-dtype choice
        @staticmethod
        def knobs_with_role(role):
            return ["bf16", "amp_dtype"] if role == "precision" else []

    users = low_precision_reader(Switches())
    assert users({"bf16": True}) and users({"amp_dtype": "float16"})
    assert users({"amp_dtype": "bf16-mixed"}) and not users({"bf16": False, "amp_dtype": "32"})
    assert low_precision_reader(None)({"anything": 1})  # no manifest: every field counts


@pytest.mark.parametrize(
    "measured_slowdown, started", [(math.log(9.0), False), (math.log(1.1), True)]
)
def test_a_bank_seed_this_host_measured_slow_is_not_a_start(measured_slowdown, started):
    """The Doctor measured bf16 9x slower per step here; a bank seed claiming 1.3x with bf16
    is judged by that before a trial is spent (it stays a candidate). A measured 1.1x slowdown
    is less than the bank's claim: the seed is tried."""
    seed = BankSeed(
        knobs={"nproc": 1, "micro_batch": 4, "precision": "bf16"},
        patches=[],
        similarity=0.5,
        expected_speedup=1.3,
        experiences=1,
        sources=[],
    )
    advice = BankAdvice(
        bank_url="sqlite://", hardware={}, workload={}, experiences=1, used=1, seeds=[seed]
    )
    import dataclasses

    problem = build_problem(find("dense-1node"), "tiny", None, bank=advice)
    (config,) = problem.bank_seeds
    problem = dataclasses.replace(
        problem,
        measured_log_speed=lambda cs: np.array(
            [measured_slowdown if c.knob_dict["precision"] == "bf16" else 0.0 for c in cs]
        ),
    )
    assert (config in problem.start_points()) is started
    assert config in problem.candidates


def test_seeds_rank_by_expected_gain_with_similarity_counted_once():
    """A 1.35x bf16 config and a 1.2x fp32 one from the same host, the fp32 one at the higher
    similarity (it does not pay the bf16 gap: 0.25 vs 0.22): expected 1.35^0.22 = 1.067 and
    1.2^0.25 = 1.047, and the larger goes first — ranking by expected gain times similarity
    again (0.231 vs 0.262) put the 1.2x first."""
    from infrarsi.bank.signatures import low_precision_reader

    there = {**HOST, "fingerprint": "hostT", "cores": 1, "bf16_over_fp32": 6.9}
    here = {**HOST, "cores": 2, "bf16_over_fp32": 6.0, "peak_flops_fp32": 6e11}
    bf16 = {"nproc": 2, "precision": "bf16", "micro_batch": 2}
    fp32 = {"nproc": 2, "precision": "fp32", "micro_batch": 1}
    rows = [
        experience("bf16", bf16, 1.35, hardware=there),
        experience("fp32", fp32, 1.2, hardware=there),
    ]
    advice = advise(
        rows,
        here,
        WORKLOAD,
        bank_url="sqlite://",
        low_precision=low_precision_reader(find("dense-1node")),
    )
    first, second = advice.seeds
    assert first.knobs == bf16 and first.similarity < second.similarity
    assert first.expected_speedup > second.expected_speedup
    assert first.expected_speedup == pytest.approx(1.35**first.similarity)


def test_a_seed_carries_its_measured_peak_ratio_only_where_it_ran_as_it_reads_here():
    """Two runs of micro-batch 4 peaked at 1.4x and 1.6x their baselines: the seed carries
    their geometric mean. Read on a host where its rank count would change, the ratio was
    measured on another config and is not carried."""
    from infrarsi.bank.transfer import seeds

    base = {"nproc": 2, "micro_batch": 2}
    mb4 = {"nproc": 2, "micro_batch": 4}
    rows = [
        experience("a", mb4, 1.3, peak=1.4e8, base_peak=1e8),
        experience("b", mb4, 1.3, run="run-2", peak=3.2e8, base_peak=2e8),
        experience("c", base, 1.0, peak=1e8, base_peak=1e8),
    ]
    (seed,) = advise(rows, HOST, WORKLOAD, bank_url="x", baseline=base).seeds
    assert seed.peak_ratio == pytest.approx(math.sqrt(1.4 * 1.6))
    one_rank = {id(e): {**e.knobs_json, "nproc": 1} for e in rows}
    (read,) = seeds([(e, 1.0) for e in rows[:2]], here=one_rank)
    assert read.as_measured == {"nproc": 2} and read.peak_ratio is None


@pytest.mark.parametrize(
    "analytic_fits, measured_share, baseline_peak, started",
    [
        (False, 0.6, True, True),  # the estimate says no, the measurement says it fits
        (True, 1.5, True, False),  # the estimate says yes, the measurement says it does not
        (False, 0.6, False, False),  # no baseline peak measured here: the estimate decides
        (True, None, True, True),  # no ratio measured: the estimate decides
    ],
)
def test_a_bank_seeds_measured_peak_ratio_overrules_the_analytic_estimate(
    analytic_fits, measured_share, baseline_peak, started
):
    """The capacity is set against the analytic estimate of the seed's peak; the baseline here
    peaks where the formula says (the formula's scale then unchanged by it), and a seed whose
    measured ratio to its baseline puts it at 0.6 of the capacity fits, at 1.5 does not,
    whatever the estimate says."""
    import dataclasses

    plain = build_problem(find("dense-1node"), "tiny", None)
    base_bytes = math.exp(plain.offset_total[plain.index[plain.baseline]])
    knobs = {"nproc": 1, "micro_batch": 4}
    ratio = None  # first the seed's estimate (no ratio), then the seed with its ratio
    for _ in range(2):
        seed = BankSeed(
            knobs=knobs,
            patches=[],
            similarity=0.2,
            expected_speedup=1.5,
            experiences=1,
            sources=[],
            peak_ratio=ratio,
        )
        advice = BankAdvice(
            bank_url="sqlite://", hardware={}, workload={}, experiences=1, used=1, seeds=[seed]
        )
        problem = build_problem(find("dense-1node"), "tiny", None, bank=advice)
        (config,) = problem.bank_seeds
        if ratio is None:
            estimate = math.exp(problem.offset_total[problem.index[config]])
            capacity = estimate * (1.2 if analytic_fits else 0.9)
        ratio = None if measured_share is None else capacity * measured_share / base_bytes
    problem = dataclasses.replace(
        problem,
        capacity_bytes=capacity,
        baseline_peak_bytes=base_bytes if baseline_peak else None,
    )
    assert bool(problem.analytic_fits()[problem.index[config]]) is analytic_fits
    assert (config in problem.start_points()) is started
    assert config in problem.candidates


def test_the_measured_baseline_peak_is_the_largest_of_the_doctors_runs():
    from types import SimpleNamespace

    from infrarsi.run.problem_build import measured_peak

    assert measured_peak(SimpleNamespace(peak_mem_bytes=[3e8, None, 4e8])) == 4e8
    assert measured_peak(SimpleNamespace(peak_mem_bytes=[None])) is None
    assert measured_peak(None) is None
