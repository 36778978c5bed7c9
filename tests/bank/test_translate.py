"""The bank reads a past config on this host: the rank count per node scales with the host's
cores (GPUs on a CUDA node), the accumulation steps follow; a rank count that does not scale to
a whole number names no config here."""

import math
from pathlib import Path

import pytest
from helpers import HOST, WORKLOAD, experience

from infrarsi.bank.transfer import advise
from infrarsi.bank.translate import parallel_units, scaled_ranks, translator
from infrarsi.workloads import find

ONE_CORE = {**HOST, "fingerprint": "hostB", "cores": 1}
BASE = {
    "nproc": 2,
    "micro_batch": 2,
    "grad_accum": 2,
    "precision": "fp32",
    "threads_per_rank": 0,
    "activation_checkpointing": False,
    "compile": "off",
    "ddp_bucket_mb": 25.0,
    "gradient_as_bucket_view": False,
    "accum_no_sync": False,
}


def test_parallel_units_are_cores_on_a_cpu_and_devices_on_a_gpu_node():
    assert parallel_units(HOST) == 2.0
    assert parallel_units({"device_type": "cuda", "device_count": 8, "cores": 96}) == 8.0
    assert parallel_units({"device_type": "cpu"}) is None


def test_a_rank_count_scales_to_a_whole_number_or_stays_a_fraction():
    assert scaled_ranks(2, 0.5) == 1 and isinstance(scaled_ranks(2, 0.5), int)
    assert scaled_ranks("4", 2.0) == 8
    assert scaled_ranks(1, 0.5) == pytest.approx(0.5)
    assert scaled_ranks(3, 2 / 3) == 2
    assert scaled_ranks("auto", 2.0) == "auto" and scaled_ranks(True, 2.0) is True


def test_two_ranks_on_two_cores_read_as_one_rank_on_one_core_with_the_batch_kept():
    translate = translator(find("dense-1node"), "bench", ONE_CORE)
    here, runs = translate({**BASE, "micro_batch": 4, "grad_accum": 1}, HOST)
    assert runs and here["nproc"] == 1 and here["micro_batch"] == 4 and here["grad_accum"] == 2
    half, runs = translate({**BASE, "nproc": 1, "grad_accum": 4}, HOST)
    assert not runs and half["nproc"] == pytest.approx(0.5)
    # the other way: one rank per core on one core is two on two; past the batch, no config
    up = translator(find("dense-1node"), "bench", HOST)
    assert up({**BASE, "nproc": 1, "grad_accum": 4}, ONE_CORE) == (
        {**BASE, "nproc": 2, "grad_accum": 2},
        True,
    )
    assert up({**BASE, "micro_batch": 4, "grad_accum": 1}, ONE_CORE)[1] is False
    # the same units, unknown units, another workload's knobs: read as measured
    assert translate(BASE, ONE_CORE) == (BASE, True)
    assert translate(BASE, {"device_type": "cpu"}) == (BASE, True)
    alien = {"nproc": 2, "lr_schedule": "cosine"}
    assert translate(alien, HOST) == (alien, True)


def test_advice_from_a_two_core_host_seeds_one_rank_per_core_on_a_one_core_host():
    """The 2-core host's best was two ranks with micro-batch 4; on one core the bank seeds one
    rank with micro-batch 4 (and says how it ran there). One rank on 2 cores reads as half a
    rank here: no seed, though its micro-batch still informs the time model."""
    rows = [
        experience("b", BASE, 1.0, hardware=HOST, stage="doctor"),
        experience("mb4", {**BASE, "micro_batch": 4, "grad_accum": 1}, 1.4, hardware=HOST),
        experience("one", {**BASE, "nproc": 1, "grad_accum": 4}, 1.6, hardware=HOST),
        experience(
            "one8", {**BASE, "nproc": 1, "micro_batch": 8, "grad_accum": 1}, 1.5, hardware=HOST
        ),
    ]
    translate = translator(find("dense-1node"), "bench", ONE_CORE)
    read = advise(
        rows, ONE_CORE, WORKLOAD, bank_url="sqlite://", baseline=BASE, translate=translate
    )
    (seed,) = read.seeds
    assert seed.knobs["nproc"] == 1 and seed.knobs["micro_batch"] == 4
    assert seed.knobs["grad_accum"] == 2
    assert seed.as_measured == {"nproc": 2, "grad_accum": 1}
    assert read.time_coefficients.get("micro_batch=8", 0) < 0  # informs the model
    assert "nproc=1" in read.time_coefficients  # two ranks there: one here
    as_written = advise(rows, ONE_CORE, WORKLOAD, bank_url="sqlite://", baseline=BASE)
    assert {s.knobs["nproc"] for s in as_written.seeds} == {1}  # the 2-core host's one rank
    assert all(s.as_measured == {} for s in as_written.seeds)
    assert math.isclose(seed.expected_speedup, 1.4**seed.similarity, rel_tol=1e-9)


def test_the_report_says_how_a_translated_seed_ran_where_it_came_from():
    from types import SimpleNamespace

    from infrarsi.records import BankAdvice
    from infrarsi.report.render import bank_lines

    row = {
        "knobs": {**BASE, "nproc": 1, "micro_batch": 4},
        "patches": [],
        "as_measured": {"nproc": 2, "grad_accum": 1},
        "expected_speedup": 1.05,
        "similarity": 0.13,
        "sources": [
            {"run_id": "r1", "hardware_fp": "hostA", "workload": "dense-1node", "stage": "run"}
        ],
        "trials": 1,
        "measured_speedup": 1.2,
        "held": True,
    }
    data = SimpleNamespace(
        bank=BankAdvice(bank_url="sqlite://", hardware={}, workload={}, experiences=4, used=4),
        summary={"baseline": {"knobs": BASE}},
        bank_seeds=[row],
    )
    _, (line,) = bank_lines(data)
    assert line[0] == "nproc=1, micro_batch=4; no patch (ran there as nproc=2, grad_accum=1)"
    assert line[-1] == "held"


def test_a_users_manifest_is_translated_by_its_roles_not_its_names(tmp_path):
    """A script launched with its own names: ``workers`` (role ranks) and ``accum`` derived
    from a fixed batch of 8 sequences."""
    from infrarsi.workloads import load_manifest

    (tmp_path / "train.py").write_text("print('step')\n")
    (tmp_path / "workload.yaml").write_text("""\
name: users-job
description: a user's script with its own knob names
launch:
  command: [torchrun, --standalone, "--nproc-per-node={workers}", train.py,
            "--batch={batch}", "--accum={accum}"]
scales:
  tiny: {params: {steps: 2}, warmup_steps: 1, timeout_s: 60}
knobs:
  - {name: workers, role: ranks, type: int, values: [1, 2, 4, 8], default: 2}
  - {name: batch, role: micro_batch, type: int, values: [1, 2, 4], default: 2}
  - {name: accum, role: grad_accum, type: int, values: [1, 2, 4, 8], derive: "8 // (batch * workers)"}
constraints:
  - {expr: "batch * accum * workers == 8", why: "a fixed global batch of 8"}
invariants:
  tokens_per_step: "8"
  loss_rtol: 0.01
files:
  editable: ["train.py"]
  locked: ["workload.yaml"]
""")
    manifest = load_manifest(tmp_path)
    eight_gpus = {"device_type": "cuda", "device_count": 8, "cores": 64}
    four_gpus = {"device_type": "cuda", "device_count": 4, "cores": 64}
    translate = translator(manifest, "tiny", four_gpus)
    assert translate({"workers": 8, "batch": 1, "accum": 1}, eight_gpus) == (
        {"workers": 4, "batch": 1, "accum": 2},
        True,
    )
    assert translate({"workers": 2, "batch": 4, "accum": 1}, eight_gpus) == (
        {"workers": 1, "batch": 4, "accum": 2},
        True,
    )


def test_a_run_asks_the_bank_on_the_host_its_doctor_probed(tmp_path):
    """``advice_for``: the bank of a 2-core host, asked by a run whose Doctor probed a 1-core
    host, seeds one rank where two ran there."""
    import json

    from infrarsi.bank import BankStore, advice_for
    from infrarsi.init import make_contract, read_instruction
    from infrarsi.init.build import workload_files
    from infrarsi.records import DoctorReport

    dense = find("dense-1node")
    contract = make_contract(
        dense,
        "bench",
        "cut time-to-train",
        read_instruction("cut time-to-train", workload_files(dense)),
    )
    probe = json.loads(
        (
            Path(__file__).resolve().parents[2]
            / "bench"
            / "data"
            / "hardware-fb737a3983921667.json"
        ).read_text()
    )
    one_core = {
        **probe,
        "fingerprint": "one-core",
        "facts": {**probe["facts"], "cores": 1, "threads": 1},
    }
    there = {**HOST, "fingerprint": "two-cores", "cores": 2}
    bank = BankStore(f"sqlite:///{tmp_path / 'bank.sqlite'}")
    bank.add(
        [
            experience("b", BASE, 1.0, hardware=there, stage="doctor"),
            experience("mb4", {**BASE, "micro_batch": 4, "grad_accum": 1}, 1.5, hardware=there),
        ],
        {},
    )
    report = DoctorReport.model_construct(knobs=dict(BASE), hardware=one_core, flops_per_token=None)
    advice = advice_for(contract, report, bank)
    assert advice.hardware["cores"] == 1 and advice.used == 2
    (seed,) = advice.seeds
    assert (seed.knobs["nproc"], seed.knobs["micro_batch"], seed.knobs["grad_accum"]) == (1, 4, 2)
    assert seed.as_measured == {"nproc": 2, "grad_accum": 1}


def test_nodes_sharing_a_host_share_its_cores_and_a_node_runs_at_least_one_rank():
    """A two-node workload launched on one machine: each "node" has half the cores. On two
    cores that is one per node, on one core half — one rank per node is the floor there, not a
    choice, so it reads as one rank per node on two cores (not two, which would put four ranks
    on two cores). Spread over two hosts, each node has its host's cores."""
    from infrarsi.bank.signatures import launchers_per_host

    two_local = {**HOST, "nodes": 2, "nodes_per_host": 2}
    one_local = {**ONE_CORE, "nodes": 2, "nodes_per_host": 2}
    assert parallel_units(two_local) == 1.0 and parallel_units(one_local) == 1.0
    assert parallel_units({**HOST, "nodes": 2}) == 1.0  # no nodes_per_host: all ran there
    assert parallel_units({**HOST, "nodes": 2, "nodes_per_host": 1}) == 2.0
    base = {
        "nproc": 1,
        "threads_per_rank": 0,
        "micro_batch": 2,
        "grad_accum": 2,
        "precision": "fp32",
        "activation_checkpointing": False,
        "fsdp_wrap": "block",
        "reshard_after_forward": True,
        "fsdp_param_dtype": "fp32",
        "accum_no_sync": False,
    }
    down = translator(find("dense-2node"), "bench", one_local)
    assert down(base, two_local) == (base, True)
    up = translator(find("dense-2node"), "bench", two_local)
    assert up(base, one_local) == (base, True)
    spread = translator(find("dense-2node"), "bench", {**ONE_CORE, "nodes": 2, "nodes_per_host": 1})
    here, runs = spread(
        {**base, "nproc": 2, "grad_accum": 1}, {**HOST, "nodes": 2, "nodes_per_host": 1}
    )
    assert runs and (here["nproc"], here["grad_accum"]) == (1, 2)
    assert launchers_per_host(2, []) == 2
    assert launchers_per_host(2, ["n1", "n2"]) == 1
    assert launchers_per_host(3, ["n1", "n1", "n2"]) == 2
