"""Patches that try to win by cheating: each is refused before running or judged invalid by
``infrarsi.verify``, with its reason named; honest patches and legitimate knobs pass the same
checks. The contract is calibrated as Doctor does it (another batch split, bf16)."""

import json
import statistics
from pathlib import Path

import pytest
from conftest import DOCTORED_INSTRUCTION, FIXTURES

from infrarsi.contract import load_contract
from infrarsi.doctor.calibrate import KIND_MULTIPLE, calibrate
from infrarsi.identity import config_key
from infrarsi.init import make_contract, read_instruction
from infrarsi.init.build import workload_files
from infrarsi.records import DOCTOR_BASELINE_LABEL
from infrarsi.trial import PatchRefused, TrialRecord, TrialStatus, prepare, run_trial
from infrarsi.verify import verify
from infrarsi.verify.reference import References, needed
from infrarsi.workloads import find, load_manifest
from infrarsi.workloads.knobs import resolve

pytestmark = [pytest.mark.adversarial, pytest.mark.slow]
CHEATS = Path(__file__).parent / "fixtures" / "adversarial"
INSTRUCTION = DOCTORED_INSTRUCTION  # the contracts of conftest.doctored are made from it too
DIFFERENT_MODEL = "final parameters differ from the baseline's"
RUNNABLE = {  # dense-1node cheats, each with the reason it must be refused for
    "shorten_sequence": "loss drift",
    "skip_optimizer_steps": "loss drift",
    "scale_loss_down": "loss drift",
    "change_data_seed": "loss drift",
    "cache_outputs": "loss drift",
    "fewer_steps": "ran 4 optimizer steps; the workload fixes 8",
    "smaller_global_batch": "tokens per optimizer step 256; the workload fixes 512",
    "forge_step_times": "a faked timer or forged metrics",
    "patch_perf_counter": "a faked timer or forged metrics",
    # the only evidence a patch cannot write: final parameters and the reference evaluation
    "remembered_loss_no_training": "parameters that did not train",
    "drop_last_block": DIFFERENT_MODEL,
    "detach_attention": "parameters that did not train",
    "sgd_mimics_the_curve": DIFFERENT_MODEL,
    "loss_on_half_positions": DIFFERENT_MODEL,
    "silent_bf16": DIFFERENT_MODEL,
    "skip_last_update": DIFFERENT_MODEL,
    # round three: small changes of the training that only a tolerance per kind of change,
    # calibrated or strict, tells from reassociation; an evaluation planted in the trial's folder
    "drop_weight_decay": DIFFERENT_MODEL,
    "bf16_gradient_allreduce": DIFFERENT_MODEL,
    "half_batch_last_step": DIFFERENT_MODEL,
    "plant_evaluation": DIFFERENT_MODEL,
    "park_memory_in_store": "held where the ranks' capacity does not look",
    # round four: the harness owns every process: a trainer that leaves the trial (its own
    # session, its trial id renamed) and works on after the launcher exits
    "finish_after_the_launcher": "were still alive 1 s after its launcher exited",
}
UNCALIBRATED = [
    "silent_bf16",
    "bf16_gradient_allreduce",
    "drop_weight_decay",
    "half_batch_last_step",
]
FUNCTION_PRESERVING = str(CHEATS / "skip_key_bias.diff")  # honest: softmax cancels the key bias
# honest: the output head registered first, so the tied matrix is saved as lm_head.weight
REGISTERED_FIRST = str(CHEATS / "register_head_first.diff")
REFUSED = {
    "locked_via_dotdot": "outside the workspace",
    "locked_via_symlink": "creates a symlink",
    "edit_the_probe": "outside the workspace",
    "edit_locked_data": "data.py: locked file",
}
ELSEWHERE = {
    "hide_memory_in_shm",
    "moe_top1_instead_of_top2",
    "toy_shift_time_into_warmup",
    "moe_bf16_gradient_allreduce",
    "skip_key_bias",
    "rewrite_metrics_at_exit",
    "train_before_the_first_step",
    "microbatch_lm_larger_lr",
    "register_head_first",
    "tanh_gelu",
    "fp32_under_a_bf16_label",
    "compile_mlp",
    # round five: the harness's clock under a throughput objective, judged through Apply
    "hold_step_records",
    "hold_every_line_forged_times",
    "open_the_probe_at_import",
    "rehearse_in_the_warmup_step",
    "hold_stdout_lines",
    "adamw_foreach",
    # round six: the window's end moved (a placeholder under the final name, the real
    # parameters linked in or written through a second name; the framework hook's save
    # replaced), the run rehearsed before a late start line: judged through Apply
    "end_moved_by_a_link",
    "end_moved_by_a_second_name",
    "rehearse_before_the_start_line",
    "framework_save_replaced",
}
LEGITIMATE = [
    ({"micro_batch": 1}, []),
    ({"nproc": 1}, []),
    ({"activation_checkpointing": True}, []),
    ({"precision": "bf16"}, []),
    ({"micro_batch": 4}, ["sdpa_attention", "fused_qkv"]),
    ({}, [FUNCTION_PRESERVING]),
    ({}, [REGISTERED_FIRST]),
    ({"precision": "bf16"}, ["sdpa_attention"]),
    ({}, [str(CHEATS / "compile_mlp.diff")]),  # a compiled submodule: its names one deeper
]
LEGITIMATE_UNCALIBRATED = [
    ({"precision": "bf16"}, []),
    ({}, ["sdpa_attention", "fused_qkv"]),
    ({}, ["fused_adamw", "chunked_cross_entropy"]),
    ({}, [FUNCTION_PRESERVING]),
]


def _both_contracts(manifest, workdir):
    """The contract as Init makes it and its first run; the contract the Doctor's calibration
    seals from that run, and the baseline under it: the same run, relabelled with the sealed
    contract's hash (the two contracts differ only in the tolerances a verdict applies)."""
    reading = read_instruction(INSTRUCTION, workload_files(manifest))
    contract = make_contract(manifest, "tiny", INSTRUCTION, reading)
    first = run_trial(prepare(manifest, "tiny", contract_hash=contract.contract_hash), workdir)
    assert first.status is TrialStatus.OK, first.error
    equivalence, notes = calibrate(manifest, "tiny", first, workdir)
    assert equivalence.calibrated and not notes, notes
    sealed = contract.model_copy(update={"equivalence": equivalence}).sealed()
    return contract, first, sealed, first.model_copy(update={"contract_hash": sealed.contract_hash})


@pytest.fixture(scope="module")
def contracts(dense, tmp_path_factory):
    """dense-1node's contract before and after the Doctor's calibration, with their baselines:
    the uncalibrated one's is the run the calibration started from (the same contract, one
    trial fewer than a baseline of its own)."""
    return _both_contracts(dense, tmp_path_factory.mktemp("baseline"))


@pytest.fixture(scope="module")
def calibrated(contracts):
    return contracts[2:]


@pytest.fixture(scope="module")
def uncalibrated(contracts):
    return contracts[:2]


@pytest.fixture(scope="module")
def moe_contracts(doctored):
    """moe-1node's contracts and baselines, as ``contracts``, from the session's
    ``infrarsi doctor`` of it (``conftest.doctored``, whose report ``test_doctor.py`` checks):
    the contract Init wrote and the Doctor's first baseline run under it (the run its
    calibration started from), the contract the Doctor sealed and its second baseline run,
    relabelled with the sealed contract's hash."""
    done = doctored("moe-1node")
    assert done.report["equivalence"]["calibrated"], done.report["equivalence_notes"]
    assert not done.report["equivalence_notes"], done.report["equivalence_notes"]
    before, sealed = (load_contract(path) for path in (done.before, done.contract))
    first, second = (
        TrialRecord.load(Path(t["trial_dir"]) / "record.json")
        for t in done.report["trials"]
        if t["label"].startswith(DOCTOR_BASELINE_LABEL)
    )
    assert first.contract_hash == before.contract_hash == second.contract_hash
    assert first.status is second.status is TrialStatus.OK
    return before, first, sealed, second.model_copy(update={"contract_hash": sealed.contract_hash})


# Each config's run, by workload, config and trial options, shared by the module's tests as
# Apply shares its reference runs (one per config and seed; the module runs at the default
# seed): a reference, or a cheat judged under two contracts, runs once. Its record names the
# contract it ran under; judged under another (the calibrated and the uncalibrated one, which
# differ only in the tolerances the verdict applies), it is the same trial, relabelled.
_RUNS: dict[str, TrialRecord] = {}


def _run(manifest, contract, workdir, knobs, patches, **options):
    full = resolve(manifest, "tiny", knobs)
    key = json.dumps([manifest.name, config_key(full, patches), options], default=str)
    if key not in _RUNS:
        spec = prepare(
            manifest, "tiny", knobs, list(patches), contract_hash=contract.contract_hash, **options
        )
        _RUNS[key] = run_trial(spec, workdir)
    record = _RUNS[key]
    return record.model_copy(update={"contract_hash": contract.contract_hash})


def _judge(manifest, contract, baseline, workdir, knobs=None, patches=(), **options):
    """Run the candidate, and the references Apply would measure for it (the same knobs
    without its patch; in bf16, its knobs at fp32 with and without it; the baseline's own
    config is the baseline run, as Apply reuses its rounds' runs); verify it."""

    def reference(knobs, patches):
        if not patches and not options and config_key(knobs) == config_key(baseline.knobs):
            return baseline
        return _run(manifest, contract, workdir, knobs, patches, **options)

    record = _run(manifest, contract, workdir, knobs or {}, patches, **options)
    wanted = needed(manifest, baseline.knobs, record.knobs, list(patches))
    refs = References.of({role: reference(k, p) for role, (k, p) in wanted.items()})
    return record, verify(contract, baseline, record, refs)


def test_the_cheat_catalog_is_complete():
    assert {p.stem for p in CHEATS.glob("*.diff")} == set(RUNNABLE) | set(REFUSED) | ELSEWHERE


def test_calibrated_tolerances_are_a_multiple_of_measured_floors(calibrated):
    eq = calibrated[0].equivalence
    assert {
        "weight_fp32",
        "eval_fp32",
        "weight_bf16",
        "eval_bf16",
        "weight_split",
        "weight_ranks",
        "weight_precision",
        "loss_split",
    } <= set(eq.floors)
    assert set(eq.by_kind) == {"split", "ranks", "precision"}
    assert eq.by_kind["split"]["weight"] == pytest.approx(
        max(KIND_MULTIPLE * eq.floors["weight_split"], 2e-4)
    )
    assert eq.weight_rtol == pytest.approx(2e-4)  # no re-run floor: the strict minimum
    assert eq.floors["weight_bf16"] > eq.floors["weight_fp32"]


@pytest.mark.parametrize("cheat", UNCALIBRATED)
def test_an_uncalibrated_contract_judges_strictly_not_loosely(dense, uncalibrated, tmp_path, cheat):
    contract, baseline = uncalibrated
    assert not contract.equivalence.calibrated
    record, verdict = _judge(
        dense, contract, baseline, tmp_path, patches=[str(CHEATS / f"{cheat}.diff")]
    )
    assert not verdict.valid, f"{cheat} passed an uncalibrated contract"
    assert any(DIFFERENT_MODEL in r or "held-out loss" in r for r in verdict.reasons), (
        verdict.reasons
    )


@pytest.mark.parametrize("knobs, patches", LEGITIMATE_UNCALIBRATED)
def test_honest_changes_pass_an_uncalibrated_contract(
    dense, uncalibrated, tmp_path, knobs, patches
):
    contract, baseline = uncalibrated
    record, verdict = _judge(dense, contract, baseline, tmp_path, knobs, patches)
    assert verdict.valid, (knobs, patches, verdict.reasons)


def test_metrics_rewritten_after_the_fact_never_reach_the_harness(dense, calibrated, tmp_path):
    """The metrics are what arrived over the harness's channel; the file in the trial's folder
    a rank rewrote at exit is the harness's copy, written again from what arrived."""
    contract, baseline = calibrated
    record, verdict = _judge(
        dense, contract, baseline, tmp_path, patches=[str(CHEATS / "rewrite_metrics_at_exit.diff")]
    )
    claimed = [t * 0.01 for t in record.metrics.harness_step_times_s]
    assert record.metrics.step_time_s > 0.2 * baseline.metrics.step_time_s  # not 0.01x
    assert all(
        abs(r - h) < 0.05
        for r, h in zip(record.metrics.step_times_s, record.metrics.harness_step_times_s)
    ), claimed


def test_training_before_the_first_step_is_charged_to_an_end_to_end_objective(
    dense, calibrated, tmp_path
):
    """The whole training done in ``configure_optimizers`` (before the first step line), the
    timed steps only replaying its losses: the parameters are right, the steps it reports are
    short — and what the end-to-end objective compares is the harness's launch-to-exit time
    (plus the patch's mapping), whatever the steps say. (A speed is not asserted here: at tiny
    scale start-up noise dwarfs the moved work; measured on a quiet machine the steps claimed
    0.16 s against the baseline's 0.36 s, launch to exit took 10.6 s against 8.4 s.)"""
    from infrarsi.objective import compared_time

    contract, baseline = calibrated
    record, verdict = _judge(
        dense,
        contract,
        baseline,
        tmp_path,
        patches=[str(CHEATS / "train_before_the_first_step.diff")],
    )
    assert record.status is TrialStatus.OK, record.error
    charged = record.metrics.e2e_time_s + record.evaluation.remap_s
    assert compared_time(record, "e2e_time") == charged
    assert (
        compared_time(record, "e2e_time")
        > record.metrics.train_time_s + record.metrics.startup_time_s - 1e-9
    )  # every second from launch, the steps' included


def _carried(saved: bytes) -> list[str]:
    """The lines of a function ``_stored()`` that returns what ``saved`` (``torch.save``'s
    bytes) holds, compressed into the patch itself: a result the patch carries."""
    import base64
    import zlib

    blob = base64.b64encode(zlib.compress(saved, 9)).decode()
    return [
        "\n",
        "\n",
        "def _stored():  # a result from the patch's own pocket\n",
        "    import base64, io, zlib\n",
        f"    blob = {blob!r}\n",
        "    data = io.BytesIO(zlib.decompress(base64.b64decode(blob)))\n",
        "    return torch.load(data, weights_only=False)\n",
    ]


def _model_diff(manifest, patched: list[str], out: Path) -> Path:
    """``out``: the diff that turns the workload's ``model.py`` into ``patched`` (its lines)."""
    import difflib

    original = (manifest.root / "model.py").read_text().splitlines(keepends=True)
    diff = difflib.unified_diff(original, patched, "a/model.py", "b/model.py")
    out.write_text("diff --git a/model.py b/model.py\n" + "".join(diff))
    return out


def _stored_result_patch(manifest, weights: Path, out: Path) -> Path:
    """A patch whose ``to_reference_params`` returns a stored result (the baseline's final
    parameters, compressed into the diff) for the final parameters, whatever the trial
    trained, and the initial ones as they are."""
    original = (manifest.root / "model.py").read_text().splitlines(keepends=True)
    patched = (
        original
        + [
            "\n",
            "\n",
            "_CALLS = []\n",
            "\n",
            "\n",
            "def to_reference_params(params):\n",
            "    _CALLS.append(1)\n",
            "    if len(_CALLS) > 1:  # the initial parameters (mapped second): as they are\n",
            "        return params\n",
            "    return _stored()\n",
        ]
        + _carried(weights.read_bytes())
    )
    return _model_diff(manifest, patched, out)


def test_a_mapping_that_returns_a_stored_result_is_refused(dense, calibrated, tmp_path):
    """The patch's mapping to the reference layout returns the baseline's parameters: it
    never sees the trained ones (only the harness's coded tensors), and what it returns is not
    a re-indexing of them."""
    contract, baseline = calibrated
    patch = _stored_result_patch(
        dense, Path(baseline.evaluation.final_weights), tmp_path / "replay_through_mapping.diff"
    )
    record, verdict = _judge(dense, contract, baseline, tmp_path / "trials", patches=[str(patch)])
    assert not verdict.valid, "a stored result passed as the evidence"
    assert any("not a re-indexing of its input" in r for r in verdict.reasons), verdict.reasons


def _replay_at_the_known_seed_patch(manifest, baseline, known_seed: int, out: Path) -> Path:
    """A patch that, run at the contract's own seed, trains nothing: its steps return the
    baseline's losses (carried in the diff) at no cost, and after its last step it puts the
    baseline's final parameters (carried too) into the model; at any other seed it trains as
    the workload does."""
    import io

    import torch

    stored = io.BytesIO()
    final = torch.load(baseline.evaluation.final_weights, weights_only=True)
    torch.save({"loss": list(baseline.metrics.loss), "final": _marked(final)}, stored)
    original = (manifest.root / "model.py").read_text().splitlines(keepends=True)
    init_end = next(i for i, line in enumerate(original) if "std=0.02 / math.sqrt" in line) + 1
    forward = next(i for i, line in enumerate(original) if "Mean next-token cross-entropy" in line)
    patched = (
        original[:init_end]
        + [
            "        self._replay = _stored() if torch.initial_seed() == _KNOWN_SEED else None\n",
            "        self._steps = [0]\n",
            "        if self._replay is not None:\n",
            "            from torch.optim.optimizer import register_optimizer_step_post_hook\n",
            "            register_optimizer_step_post_hook(self._after_step)\n",
            "\n",
            "    def _after_step(self, *_):\n",
            "        self._steps[0] += 1\n",
            "        if self._steps[0] == len(self._replay['loss']):  # the last: stored\n",
            "            with torch.no_grad():\n",
            "                for name, p in self.named_parameters():\n",
            "                    if name in self._replay['final']:\n",
            "                        p.copy_(self._replay['final'][name])\n",
        ]
        + original[init_end : forward + 1]
        + [
            "        if self._replay is not None:  # the known seed: the stored curve, no work\n",
            "            losses = self._replay['loss']\n",
            "            value = losses[min(self._steps[0], len(losses) - 1)]\n",
            "            return sum(p.sum() for p in self.parameters()) * 0.0 + value\n",
        ]
        + original[forward + 1 :]
        + ["\n", "\n", f"_KNOWN_SEED = {known_seed}\n"]
        + _carried(stored.getvalue())
    )
    return _model_diff(manifest, patched, out)


def _same_params(a: str, b: str) -> bool:
    import torch

    x, y = (torch.load(path, weights_only=True) for path in (a, b))
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def _replayed(record, baseline) -> bool:
    """Whether ``record``'s final parameters are the stored result: the baseline's with the
    replay's mark (its first element one step up), which no training produces."""
    import torch

    mine = torch.load(record.evaluation.final_weights, weights_only=True)
    stored = _marked(torch.load(baseline.evaluation.final_weights, weights_only=True))
    return all(torch.equal(mine[k], stored[k]) for k in stored)


def _marked(params: dict) -> dict:
    """``params`` with the replay's mark: the first element of the first one a step up."""
    import torch

    first = next(iter(params.values())).view(-1)
    first[0] = torch.nextafter(first[0], torch.tensor(float("inf")))
    return params


def test_a_replay_at_the_known_seed_is_honest_work_when_challenged(dense, calibrated, tmp_path):
    """The class the challenge seed stops: a patch that replays a stored result (the baseline's
    curve and final parameters) at the contract's seed, and trains honestly at any other. At
    the known seed nothing in the evidence can tell it from training (verify accepts it: its
    parameters are the baseline's but for the mark that shows the replay ran, and its steps
    cost nothing) — which is why no
    timed run is at that seed. At a seed drawn now, set by the harness, the same patch runs the
    workload's own training: what a round times is honest work, it gains nothing it did not
    earn."""
    import secrets

    contract, baseline = calibrated
    known = next(iter(contract.invariants.seeds.values()))
    assert baseline.seed is None  # the baseline ran at the contract's own seed
    patch = str(_replay_at_the_known_seed_patch(dense, baseline, known, tmp_path / "replay.diff"))
    replayed, verdict = _judge(dense, contract, baseline, tmp_path / "known", patches=[patch])
    assert verdict.valid, verdict.reasons  # the replay passes where the seed is known
    assert _replayed(replayed, baseline)

    seed = secrets.randbelow(2**31 - 2) + 1
    while seed == known:
        seed = secrets.randbelow(2**31 - 2) + 1
    challenged = tmp_path / "challenged"
    base, cand = (
        run_trial(
            prepare(dense, "tiny", {}, ps, contract_hash=contract.contract_hash, seed=seed),
            challenged,
        )
        for ps in ([], [patch])
    )
    assert base.seed == cand.seed == seed
    verdict = verify(contract, base, cand, References.of({}))
    assert verdict.valid, verdict.reasons  # honest work at the challenge seed
    assert any(line.startswith("challenge seed") for line in verdict.ran), verdict.ran
    # it trained: its parameters are the same-seed baseline's, and not the stored result
    assert _same_params(cand.evaluation.final_weights, base.evaluation.final_weights)
    assert not _replayed(cand, baseline)


@pytest.mark.parametrize(
    "cheat, why",
    [
        # an approximation an LLM would honestly propose, paired with bf16 by the search: it
        # hides inside bf16's tolerance, and shows at fp32
        ("tanh_gelu", "the patch at fp32"),
        # the loop's bf16 autocast region closed: fp32 runs under a bf16 label
        ("fp32_under_a_bf16_label", "not the precision that ran"),
    ],
)
def test_a_bf16_candidates_patch_is_judged_at_fp32_and_its_bf16_must_run(
    dense, calibrated, tmp_path, cheat, why
):
    contract, baseline = calibrated
    record, verdict = _judge(
        dense, contract, baseline, tmp_path, {"precision": "bf16"}, [str(CHEATS / f"{cheat}.diff")]
    )
    assert not verdict.valid, f"{cheat} passed verification"
    assert any(why in reason for reason in verdict.reasons), verdict.reasons


def test_a_planted_evaluation_is_never_run(dense, calibrated, tmp_path):
    contract, baseline = calibrated
    record, verdict = _judge(
        dense, contract, baseline, tmp_path, patches=[str(CHEATS / "plant_evaluation.diff")]
    )
    assert record.evaluation.eval_loss is not None and record.evaluation.eval_loss != 0.125
    assert not verdict.valid


@pytest.mark.parametrize("cheat", sorted(RUNNABLE))
def test_cheat_is_judged_invalid_with_its_reason(dense, calibrated, tmp_path, cheat):
    contract, baseline = calibrated
    record, verdict = _judge(
        dense, contract, baseline, tmp_path, patches=[str(CHEATS / f"{cheat}.diff")]
    )
    assert not verdict.valid, f"{cheat} passed verification"
    assert any(RUNNABLE[cheat] in reason for reason in verdict.reasons), verdict.reasons


@pytest.mark.parametrize("cheat", sorted(REFUSED))
def test_cheat_is_refused_before_running(dense, tmp_path, cheat):
    with pytest.raises(PatchRefused, match=REFUSED[cheat]):
        prepare(dense, "tiny", {}, [str(CHEATS / f"{cheat}.diff")])


@pytest.mark.parametrize("knobs, patches", LEGITIMATE)
def test_legitimate_knobs_and_honest_patches_pass_every_check(
    dense, calibrated, tmp_path, knobs, patches
):
    contract, baseline = calibrated
    record, verdict = _judge(dense, contract, baseline, tmp_path, knobs, patches)
    assert verdict.valid, (knobs, patches, verdict.reasons)
    assert verdict.not_checked == [] and record.evaluation.eval_loss is not None


def test_memory_hidden_in_shared_mappings_counts_against_the_capacity(dense, calibrated, tmp_path):
    contract, baseline = calibrated
    cap = baseline.metrics.max_peak_mem_bytes + 150 * 2**20
    record, verdict = _judge(
        dense,
        contract,
        baseline,
        tmp_path,
        patches=[str(CHEATS / "hide_memory_in_shm.diff")],
        mem_cap_bytes=cap,
    )
    assert record.status is TrialStatus.OOM and not verdict.valid
    assert "ran out of memory" in verdict.reasons[0]


def test_static_screen_flags_are_shown_in_the_verdict(dense, calibrated, tmp_path):
    contract, baseline = calibrated
    record, verdict = _judge(
        dense, contract, baseline, tmp_path, patches=[str(CHEATS / "patch_perf_counter.diff")]
    )
    assert any("monkeypatches a module attribute" in f for f in verdict.flags), verdict.flags


def test_memory_over_the_contract_capacity_is_invalid(calibrated):
    contract, baseline = calibrated
    small = contract.model_copy(update={"mem_cap_bytes": 100 * 2**20}).sealed()
    verdict = verify(small, baseline, baseline)
    assert any("peak memory over the capacity" in r for r in verdict.reasons), verdict.reasons


def test_a_record_without_the_contract_hash_is_refused(calibrated):
    contract, baseline = calibrated
    verdict = verify(contract, baseline, baseline.model_copy(update={"contract_hash": None}))
    assert any("did not run under the contract" in r for r in verdict.reasons), verdict.reasons


def test_a_user_diff_named_like_a_catalog_patch_is_never_shown_as_it(dense, tmp_path):
    lookalike = tmp_path / "sdpa_attention.diff"
    lookalike.write_text(dense.patch_path("sdpa_attention").read_text())
    (source,) = prepare(dense, "tiny", {}, [str(lookalike)]).patches
    assert (source.id, source.catalog) == ("sdpa_attention.diff", False)


def test_moe_top1_instead_of_top2_is_refused(moe_contracts, tmp_path):
    moe = find("moe-1node")
    contract, baseline = moe_contracts[:2]
    record, verdict = _judge(
        moe, contract, baseline, tmp_path, patches=[str(CHEATS / "moe_top1_instead_of_top2.diff")]
    )
    assert not verdict.valid
    assert any(DIFFERENT_MODEL in r for r in verdict.reasons), verdict.reasons


def test_a_bf16_gradient_all_reduce_on_moe_is_judged_by_the_floors_it_shares(
    moe_contracts, tmp_path
):
    """The MoE split moves the weights by ~2e-2 (its balancing loss is per micro-batch); a
    candidate that keeps the split is judged by the strict base, not by that floor — and one
    that changes the split too cannot borrow the split's tolerance (accepted by the kinds rule
    alone, 2.7e-2 inside 10x the split's floor): it is judged against the same split without
    the patch."""
    moe = find("moe-1node")
    contract, baseline = moe_contracts[2:]
    assert contract.equivalence.by_kind["split"]["weight"] > 10 * contract.equivalence.weight_rtol
    record, verdict = _judge(
        moe,
        contract,
        baseline,
        tmp_path,
        patches=[str(CHEATS / "moe_bf16_gradient_allreduce.diff")],
    )
    assert not verdict.valid and any(DIFFERENT_MODEL in r for r in verdict.reasons), verdict.reasons
    borrowed = [str(CHEATS / "moe_bf16_gradient_allreduce.diff")]
    record, verdict = _judge(moe, contract, baseline, tmp_path, {"micro_batch": 1}, borrowed)
    assert not verdict.valid and any(DIFFERENT_MODEL in r for r in verdict.reasons), verdict.reasons
    assert any(r.startswith("same-knob reference") for r in verdict.ran), verdict.ran
    for knobs, patches in (
        ({"micro_batch": 1}, []),
        ({}, ["grouped_dispatch"]),
        ({"micro_batch": 1}, ["grouped_dispatch"]),
    ):
        record, verdict = _judge(moe, contract, baseline, tmp_path, knobs, patches)
        assert verdict.valid, (knobs, patches, verdict.reasons)


def test_time_moved_into_the_warmup_step_is_refused_and_ranks_on_the_harness_clock(tmp_path):
    toy = load_manifest(FIXTURES / "toy")
    contract = make_contract(toy, "tiny", "cut time", read_instruction("cut time", []))
    run = lambda patches=(): run_trial(
        prepare(  # noqa: E731
            toy, "tiny", {"sleep_ms": 200}, list(patches), contract_hash=contract.contract_hash
        ),
        tmp_path,
    )
    baseline, cheat = run(), run([str(CHEATS / "toy_shift_time_into_warmup.diff")])
    verdict = verify(contract, baseline, cheat)
    assert not verdict.valid
    # caught by the per-step check, or (when the moved time also leaves the reported total
    # short of the harness's span by more than its margin) by the total-time check first
    assert any(
        "time moved between steps" in r or "harness saw the training take" in r
        for r in verdict.reasons
    ), verdict.reasons
    assert cheat.metrics.step_time_s < 0.7 * baseline.metrics.step_time_s  # what it claims
    assert cheat.metrics.harness_step_time_s > 0.8 * baseline.metrics.harness_step_time_s


def test_a_script_that_prints_one_micro_batch_loss_is_judged_per_kind_of_change(tmp_path):
    """nanoGPT prints its last micro-batch's loss: another split prints another sample of the
    same training. Doctor calibrates the loss check on that script's own printed losses; a
    faster honest split passes, a change of the training that keeps the split does not."""
    lm = load_manifest(FIXTURES / "microbatch-lm")
    instruction = "cut time, keep loss within 1%"
    contract = make_contract(lm, "tiny", instruction, read_instruction(instruction, []))
    # each config runs once (``_run``): the sealed contract's baseline and split are the
    # calibration's runs, relabelled with its hash
    baseline = _run(lm, contract, tmp_path, {}, ())
    equivalence, notes = calibrate(
        lm, "tiny", baseline, tmp_path, run=lambda _, knobs: _run(lm, contract, tmp_path, knobs, ())
    )
    assert "split" in equivalence.by_kind and "loss" in equivalence.by_kind["split"], notes
    contract = contract.model_copy(update={"equivalence": equivalence}).sealed()
    run = lambda knobs, patches=(): _run(lm, contract, tmp_path, knobs, patches)  # noqa: E731
    baseline = run({})
    split = run({"batch_size": 4})
    assert verify(contract, baseline, split).valid, verify(contract, baseline, split).reasons
    uncalibrated = contract.model_copy(update={"equivalence": type(equivalence)()}).sealed()
    rehashed = [
        r.model_copy(update={"contract_hash": uncalibrated.contract_hash})
        for r in (baseline, split)
    ]
    assert not verify(uncalibrated, *rehashed).valid  # what it was before: "loss drift"
    cheat = run({}, [str(CHEATS / "microbatch_lm_larger_lr.diff")])
    verdict = verify(contract, baseline, cheat)
    assert not verdict.valid and any("loss drift" in r for r in verdict.reasons), verdict.reasons


# Round five: cheats that train exactly what the baseline trains and shape only the lines a
# throughput objective would time; each is refused through Apply (the harness's clock: the
# window the kernel bounds, against the same knobs without the patch in the same round, over
# the Doctor's timed steps), and honest kernel patches pass every check there.
THROUGHPUT = "maximise training throughput, keep the loss within 1%"
TIMED_STEPS = 90  # at tiny: ~1.5 s of steps, past the clock's 1 s slack; a timed run ~7 s
# the run done before its start line: the start comes late, the steps claim what the window
# (whose end no placeholder moves) does not show
BEFORE_THE_STEPS = ("its steps began", "the steps claim")
CLOCK_CHEATS = {
    "hold_step_records": ("held back and released together",),  # in any trial, by its lines
    "hold_every_line_forged_times": ("the steps claim",),  # spaced, forged: only the clock tells
    "open_the_probe_at_import": ("the steps claim",),  # a start line at import, steps held
    "rehearse_in_the_warmup_step": ("the steps claim",),  # the whole run inside step 0
    # round six: accepted before at 1.3x-1.8x in one round (charged below zero, handed to the
    # lines), promoted through the patch agent at 4.4x-5.4x
    "end_moved_by_a_link": BEFORE_THE_STEPS,
    "end_moved_by_a_second_name": BEFORE_THE_STEPS,
    "rehearse_before_the_start_line": BEFORE_THE_STEPS,
}
HONEST_TIMED = [["sdpa_attention", "fused_qkv"], [str(CHEATS / "adamw_foreach.diff")]]
# What one cheat's compared time may fall to against its round's baseline, and all of them
# together (their median). One round's charge moves by the two windows' difference over the
# timed steps: identical runs' windows differed by 0.7 s on a quiet host and by ~1.4 s in a
# loaded CI (a cheat charged 0.59x there), so one measurement is held only to what its lines
# could never reach (the held lines claim 0.0004 s a step, ~0.02x), the median to no gain.
CHEAT_FLOOR, CHEATS_MEDIAN_FLOOR = 0.3, 0.8


def _ranked_run(run_dir: Path, contract, configs: list[tuple[dict, list[str]]]) -> Path:
    """A run directory whose ranking is ``configs``, best first: what Apply re-measures, as
    a search that ranked them on their lines' arrivals would hand them over."""
    from infrarsi.options import SearchOptions
    from infrarsi.records import RankedConfig
    from infrarsi.store import RunStatus, Store, StoredRun, sqlite_url

    run_dir.mkdir(parents=True)
    store = Store(sqlite_url(run_dir))
    run_id = "run-round-five"
    search = SearchOptions()  # InfraRSI's searcher, the contract's budget
    store.create_run(
        StoredRun.opened(run_id, contract, contract.workload, search, RunStatus.FINISHED)
    )
    ranked = [RankedConfig(knobs=k, patches=p, trials=1, step_time_s=1e-4) for k, p in configs]
    store.set_ranking(run_id, ranked)
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "store_url": store.url}))
    return run_dir


def _throughput(contract):
    """``contract`` as a throughput objective whose Apply times patches over TIMED_STEPS."""
    from infrarsi.contract import NoisePolicy

    return contract.model_copy(
        update={
            "objective": "tokens_per_s",
            "instruction": THROUGHPUT,
            "noise": NoisePolicy(timed_steps=TIMED_STEPS),
        }
    ).sealed()


def test_cheats_on_a_throughput_clock_are_refused_through_apply_and_honest_patches_pass(
    dense, calibrated, tmp_path
):
    """Held step records, every line held and forged, a probe opened at import, the whole run
    rehearsed inside the first step or before the start line, the window's end moved by a
    placeholder under the final name (the real parameters linked in, or written through a
    second name): none is promoted, each refused with its reason; the compared time of each
    is the harness's (no gain it did not earn); a start line refused against one run of the
    baseline is judged again against a second; SDPA with one GEMM for q, k and v, and
    AdamW's foreach path, pass every check in every round."""
    from infrarsi.apply import apply_run

    contract = _throughput(calibrated[0])
    configs = [({}, [str(CHEATS / f"{c}.diff")]) for c in CLOCK_CHEATS]
    configs += [({}, patches) for patches in HONEST_TIMED]
    run_dir = _ranked_run(tmp_path / "run", contract, configs)
    result = apply_run(run_dir, top_k=len(configs), rounds=1)  # a check fails in one round
    judged = {tuple(c.patches): c for c in result.candidates}
    base = {m.round: m.compared_s for m in result.measurements if m.label == "baseline"}
    ratios = []  # a cheat's compared time over the baseline's, in its round
    for (_, patches), why in zip(configs, CLOCK_CHEATS.values()):
        cheat = judged[tuple(patches)]
        assert not cheat.verified and not cheat.promoted, (patches, cheat.reasons)
        assert any(w in r for r in cheat.reasons for w in why), (patches, cheat.reasons)
        for m in (m for m in result.measurements if m.label == cheat.label and m.compared_s):
            ratios.append(m.compared_s / base[m.round])
            assert ratios[-1] > CHEAT_FLOOR, (patches, m.compared_s, m.step_time_s, base)
    # together, the cheats (which train what the baseline trains, some of them twice) gain nothing
    assert statistics.median(ratios) > CHEATS_MEDIAN_FLOOR, ratios
    for patches in HONEST_TIMED:
        honest = judged[tuple(patches)]
        assert honest.verified, (patches, honest.reasons)
        timed = [m for m in result.measurements if m.label == honest.label]
        assert len(timed) == 1 and all(m.timed_against for m in timed)
        assert all(any(r.startswith("harness clock: the first open") for r in m.ran) for m in timed)
    assert result.promoted in (None, *(judged[tuple(p)].label for p in HONEST_TIMED))
    again = [r for r in result.references if r.role == "start_again"]
    assert again and all(r.patches == [] for r in again)  # the baseline, measured again
    rehearsed = judged[(str(CHEATS / "rehearse_before_the_start_line.diff"),)]
    timed = [m for m in result.measurements if m.label == rehearsed.label]
    said = [(m.reasons, m.ran) for m in timed]  # what decided, should a slack move it
    assert any("its start-up measured again" in r for m in timed for r in m.ran), said
    trials = [m for m in result.measurements]
    assert {TrialRecord.load(Path(m.trial_dir) / "record.json").steps for m in trials} == {
        TIMED_STEPS
    }


def test_step_lines_a_script_held_on_its_standard_output_are_refused_through_apply(tmp_path):
    """A user's script read from its standard output: ``sys.stdout`` replaced in its model
    module, every ``iter N`` line kept and written together at exit. The lines' own times are
    genuine; their arrival is not: the trial is invalid, in Apply as in any trial."""
    from infrarsi.apply import apply_run

    lm = load_manifest(FIXTURES / "microbatch-lm")
    contract = make_contract(lm, "tiny", THROUGHPUT, read_instruction(THROUGHPUT, []))
    assert contract.objective == "tokens_per_s"
    patch = [str(CHEATS / "hold_stdout_lines.diff")]
    run_dir = _ranked_run(tmp_path / "run", contract, [({}, patch)])
    result = apply_run(run_dir, top_k=1, rounds=1)
    (cheat,) = result.candidates
    assert not cheat.verified and not cheat.promoted
    assert any("held back and released together" in r for r in cheat.reasons), cheat.reasons


def test_a_framework_jobs_final_save_replaced_cannot_end_its_window_early(tmp_path):
    """An accelerate loop whose script the user left editable, its parameters saved by the
    harness's framework hook: a patch writes a placeholder under the final name before anything
    trains, turns the hook's rename into a hard link, trains every step silently and then
    prints the lines at "2 ms" a step, spaced to match. Before round six its window ended at
    the placeholder and it was accepted at 48x; now the window ends when the real parameters
    were linked in, and it is refused through Apply."""
    import shutil

    import yaml
    from conftest import run_cli

    from infrarsi.apply import apply_run

    folder = tmp_path / "job"
    shutil.copytree(FIXTURES / "accelerate-lm", folder)
    command = ("python", "train.py", "--per-device-batch", "4", "--accum", "2", "--steps", "6")
    drafted = run_cli(
        "manifest", "draft", "-o", "workload.yaml", "--yes", "--", *command, cwd=folder
    )
    assert drafted.returncode == 0, drafted.stderr
    raw = yaml.safe_load((folder / "workload.yaml").read_text())
    assert raw["evaluation"]["framework"] == "accelerate"
    raw["files"] = {"editable": ["train.py"], "locked": []}  # the user lets it edit the script
    # the steps read from the printed lines, as the notes offer (the observer's own records,
    # the draft's default, time each step as it ends: printing late gains nothing there)
    said = " ".join(drafted.stderr.split())
    shown = said.split("to read the lines instead, set launch.metrics to ")[1]
    raw["launch"]["metrics"], _ = json.JSONDecoder().raw_decode(shown)
    (folder / "workload.yaml").write_text(yaml.safe_dump(raw))
    manifest = load_manifest(folder / "workload.yaml")
    contract = make_contract(manifest, "tiny", THROUGHPUT, read_instruction(THROUGHPUT, []))
    contract = _throughput(contract)
    patch = [str(CHEATS / "framework_save_replaced.diff")]
    result = apply_run(_ranked_run(tmp_path / "run", contract, [({}, patch)]), top_k=1, rounds=1)
    (cheat,) = result.candidates
    assert not cheat.verified and not cheat.promoted
    why = (*BEFORE_THE_STEPS, "the window did not contain the run")
    assert any(w in r for r in cheat.reasons for w in why), cheat.reasons
    base = {m.round: m.compared_s for m in result.measurements if m.label == "baseline"}
    for m in (m for m in result.measurements if m.label == cheat.label):
        assert m.compared_s is None or m.compared_s > 0.6 * base[m.round], (m.compared_s, base)
        record = TrialRecord.load(Path(m.trial_dir) / "record.json")
        # the window's end: the real parameters linked in at exit, after every step line
        last_line = record.metrics.e2e_time_s - record.metrics.harness_tail_s
        assert record.metrics.final_saved_s >= last_line, record.metrics
