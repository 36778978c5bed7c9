"""The command line as a user meets it: real processes, real exit codes and messages."""

import json
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import run_cli
from typer.testing import CliRunner


def test_apply_report_and_optimize_refuse_bad_input_with_the_fix(tmp_path):
    for stage in ("apply", "report"):
        result = run_cli(stage, str(tmp_path / "nothing"), cwd=tmp_path)
        assert result.returncode == 2 and "holds no run" in result.stderr
        assert "infrarsi run" in result.stderr
    result = run_cli("optimize", "no-such-workload", "faster", "--yes", cwd=tmp_path)
    assert result.returncode == 2 and "no-such-workload" in result.stderr
    result = run_cli("optimize", "dense-1node", "memory under 0 GiB", "--yes", cwd=tmp_path)
    assert result.returncode == 2 and "memory" in result.stderr
    assert not (tmp_path / ".infrarsi").exists()  # nothing was run


def test_run_without_a_contract_or_with_a_bad_searcher_says_what_to_give(tmp_path):
    result = run_cli("run", cwd=tmp_path)
    assert result.returncode == 2 and "--resume" in result.stderr
    result = run_cli("run", "--resume", str(tmp_path / "nothing"), cwd=tmp_path)
    assert result.returncode == 2 and "holds no run" in result.stderr
    made = run_cli("init", "dense-1node", "make it faster", "--yes", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    result = run_cli("run", "contract.yaml", "--searcher", "bayes", cwd=tmp_path)
    assert result.returncode == 2 and "infrarsi, random" in result.stderr


def test_workloads_json_lists_knobs_and_patches():
    result = run_cli("workloads", "--json")
    assert result.returncode == 0, result.stderr
    listing = {w["name"]: w for w in json.loads(result.stdout)}
    dense = listing["dense-1node"]
    knob_names = {k["name"] for k in dense["knobs"]}
    assert {
        "nproc",
        "threads_per_rank",
        "micro_batch",
        "grad_accum",
        "precision",
        "activation_checkpointing",
        "compile",
        "ddp_bucket_mb",
        "gradient_as_bucket_view",
    } <= knob_names
    assert {"sdpa_attention", "fused_adamw", "chunked_cross_entropy", "fused_qkv"} <= set(
        dense["patches"]
    )
    assert set(listing) == {"dense-1node", "dense-2node", "moe-1node", "moe-2node"}
    assert all(len(w["patches"]) >= 4 for w in listing.values())
    assert "explicit_prefetch" in listing["dense-2node"]["patches"]
    assert {"grouped_dispatch", "merged_all_to_all"} <= set(listing["moe-2node"]["patches"])
    assert "expert_parallel" in {k["name"] for k in listing["moe-2node"]["knobs"]}


def test_python_dash_m_and_help():
    result = run_cli("--help")
    assert result.returncode == 0 and "trial" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--set", "micro_batch=4", "--set", "grad_accum=2"],
            "tokens per optimizer step are fixed",
        ),
        (["--set", "precision=fp8"], "outside its domain"),
        (["--set", "micro_batch"], "KNOB=VALUE"),
        (["--mem-cap", "300M"], "is not a size"),
        (["--scale", "huge"], "unknown scale 'huge'"),
        (["--patch", "nope"], "unknown patch 'nope'"),
    ],
)
def test_bad_trial_input_is_refused_before_running(tmp_path, args, message):
    result = run_cli("trial", "dense-1node", "--workdir", str(tmp_path), *args)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr.replace("\n", " ")
    assert not any(tmp_path.iterdir()), "nothing may run for refused input"


def test_unknown_workload_is_named():
    result = run_cli("trial", "no-such-workload")
    assert result.returncode == 2 and "no workload 'no-such-workload'" in result.stderr


def test_catalog_patch_touching_a_locked_file_is_refused(tmp_path, dense):
    root = tmp_path / "w"
    shutil.copytree(dense.root, root)
    (root / "patches" / "evil.diff").write_text(
        "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-x\n+y\n"
    )
    data = yaml.safe_load((root / "workload.yaml").read_text())
    data["patches"].append(
        {
            "id": "evil",
            "file": "patches/evil.diff",
            "title": "t",
            "category": "kernel",
            "prior": {"step_time_ratio": 0.5, "peak_mem_ratio": 1.0},
        }
    )
    (root / "workload.yaml").write_text(yaml.safe_dump(data))
    trials = tmp_path / "trials"
    result = run_cli("trial", str(root), "--patch", "evil", "--workdir", str(trials))
    assert result.returncode == 2
    assert "train.py: locked file" in result.stderr
    assert not trials.exists()


def test_bad_manifest_names_the_field(tmp_path, dense):
    root = tmp_path / "w"
    shutil.copytree(dense.root, root)
    data = yaml.safe_load((root / "workload.yaml").read_text())
    data["scales"]["tiny"]["warmup_steps"] = -1
    (root / "workload.yaml").write_text(yaml.safe_dump(data))
    result = run_cli("trial", str(root))
    assert result.returncode == 2
    assert "field 'scales.tiny.warmup_steps'" in result.stderr


def test_init_writes_the_must_show_contract(tmp_path):
    instruction = (
        "Cut end-to-end time; keep loss within 0.5% and memory under 2 GiB per rank; "
        "don't touch the data pipeline; 20 trials"
    )
    result = run_cli(
        "init",
        "dense-1node",
        instruction,
        "--scale",
        "tiny",
        "-o",
        str(tmp_path / "c.yaml"),
        "--yes",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    c = json.loads(result.stdout)
    assert c["loss_tolerance"] == 0.005 and c["mem_cap_bytes"] == 2 * 2**30
    assert c["budget_trials"] == 20 and "data.py" in c["locked"]
    assert c["not_understood"] == [] and len(c["contract_hash"]) == 64
    assert (tmp_path / "c.yaml").is_file()


def test_init_lists_what_it_did_not_understand(tmp_path):
    result = run_cli(
        "init", "dense-1node", "Cut time; paint it blue", "-o", str(tmp_path / "c.yaml"), "--yes"
    )
    assert result.returncode == 0, result.stderr
    assert "NOT understood" in result.stdout and "paint it blue" in result.stdout


def test_init_without_yes_and_without_a_terminal_asks_for_yes(tmp_path):
    result = run_cli("init", "dense-1node", "Cut time", "-o", str(tmp_path / "c.yaml"))
    assert result.returncode == 2 and "--yes" in result.stderr
    assert not (tmp_path / "c.yaml").exists()


def test_trial_refuses_a_contract_whose_locked_files_changed(tmp_path, dense):
    root = tmp_path / "w"
    shutil.copytree(dense.root, root)
    contract = tmp_path / "c.yaml"
    assert (
        run_cli("init", str(root), "memory under 2 GiB", "-o", str(contract), "--yes").returncode
        == 0
    )
    (root / "data.py").write_text((root / "data.py").read_text() + "\n# edited\n")
    result = run_cli(
        "trial", str(root), "--contract", str(contract), "--workdir", str(tmp_path / "trials")
    )
    assert result.returncode == 2
    assert "locked files no longer match" in result.stderr and "data.py" in result.stderr
    assert not (tmp_path / "trials").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["init", "dense-1node", "memory under 0 GiB", "--yes"], "more than 0 bytes"),
        (["init", "dense-1node", "loss within 150%", "--yes"], "below 100%"),
        (["trial", "dense-1node", "--timeout", "-1"], "positive number of seconds"),
        (["trial", "dense-1node", "--mem-cap", "0"], "positive size"),
        (["validate", "/nonexistent/workload.yaml"], "no workload"),
        (["doctor", "/nonexistent/contract.yaml"], "no such contract"),
    ],
)
def test_bad_input_exits_2_with_a_message_never_a_traceback(tmp_path, args, message):
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_validate_and_show_a_users_manifest():
    from conftest import FIXTURES

    result = run_cli("validate", str(FIXTURES / "foreign"))
    assert result.returncode == 0 and "ok: foreign-lm" in result.stdout
    listing = json.loads(run_cli("workloads", str(FIXTURES / "foreign"), "--json").stdout)
    assert [w["name"] for w in listing] == ["foreign-lm"]
    assert {"name": "bf16", "role": "precision", "type": "bool", "flag": "--bf16"}.items() <= next(
        k for k in listing[0]["knobs"] if k["name"] == "bf16"
    ).items()


@pytest.mark.parametrize(
    "args, message",
    [
        (["trial", "dense-1node", "--scale", "huge"], "unknown scale 'huge'; dense-1node has"),
        (["trial", "dense-1node", "--set", "micro_batch=banana"], "'banana' is not an integer"),
    ],
)
def test_a_bad_name_or_value_is_said_plainly_in_process(monkeypatch, capsys, args, message):
    from infrarsi.cli import main

    monkeypatch.setattr("sys.argv", ["infrarsi", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 2
    stderr = capsys.readouterr().err
    assert message in stderr and "Traceback" not in stderr and '"unknown' not in stderr


def test_an_unexpected_exception_is_reported_as_a_bug_not_as_bad_input(monkeypatch, capsys):
    """A KeyError from InfraRSI's own code is a bug: it must not read as the user's error."""
    import infrarsi.cli as cli

    def broken(name):
        return {}["a key the code forgot"]

    monkeypatch.setattr(cli, "find", broken)
    monkeypatch.setattr("sys.argv", ["infrarsi", "workloads", "dense-1node"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 3
    stderr = capsys.readouterr().err
    assert "Traceback" in stderr and "KeyError" in stderr and "bug in InfraRSI" in stderr


def test_the_demo_is_optimize_on_the_bundled_workload_offline_with_the_given_budget(monkeypatch):
    """What ``infrarsi demo`` hands ``optimize``: the bundled workload, the catalog only (no
    LLM, offline), the budget and top-k given, no question asked."""
    import infrarsi.cli.optimize as screen
    from infrarsi.cli import err, out

    seen = {}
    monkeypatch.setattr(
        screen, "optimize_command", lambda *args, **kwargs: seen.update(args=args, **kwargs)
    )
    screen.demo_command("tiny", 5, 2, out, err)
    workload, instruction, options = seen["args"]
    assert workload == "dense-1node" and "loss within 1%" in instruction
    assert "throughput" in instruction  # what the steps move at tiny, not start-up
    assert options.proposer.kind == "catalog" and options.search.budget.trials == 5
    assert options.top_k == 2 and options.scale == "tiny" and seen["yes"] is True


def test_the_demo_runs_the_tiny_model_over_more_steps_by_default():
    """The demo's scale is the bundled workload's own: tiny's model, more steps to measure the
    steady step it optimises (no demo-only model, baseline or check)."""
    import inspect

    from infrarsi import cli
    from infrarsi.workloads import find

    assert inspect.signature(cli.demo).parameters["scale"].default.default == "steady"
    manifest = find("dense-1node")
    tiny, steady = manifest.scale("tiny"), manifest.scale("steady")
    assert {**steady.params, "steps": None} == {**tiny.params, "steps": None}
    assert steady.params["steps"] >= 5 * tiny.params["steps"]


@pytest.mark.parametrize(
    "args",
    [
        ["bank", "list", "--bank", "postgresql+psycopg://nobody@127.0.0.1:1/none"],
        [
            "optimize",
            "dense-1node",
            "faster",
            "--yes",
            "--bank",
            "postgresql+psycopg://x@127.0.0.1:1/y",
        ],
    ],
)
def test_a_database_that_cannot_be_reached_is_bad_input_not_a_bug(
    monkeypatch, capsys, tmp_path, args
):
    """Nothing listens on port 1 of loopback: the connection is refused at once, before any
    trial or folder."""
    from infrarsi.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["infrarsi", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    stderr = capsys.readouterr().err
    assert exit_.value.code == 2, stderr
    assert "cannot open the experience bank" in stderr and "Traceback" not in stderr
    assert not (tmp_path / ".infrarsi").exists()


def test_a_run_store_that_cannot_be_reached_says_so(tmp_path):
    from infrarsi.store import Store, StoreError

    with pytest.raises(StoreError, match="cannot open the store"):
        Store("postgresql+psycopg://nobody@127.0.0.1:1/none")


def test_optimize_ends_with_what_was_promoted_its_verified_speed_up_and_the_paths():
    from infrarsi.cli.optimize import headline
    from infrarsi.optimize import OptimizeResult, RoundResult
    from infrarsi.records import CandidateResult

    winner = CandidateResult(
        label="c1",
        knobs={"micro_batch": 4, "nproc": 2},
        patches=["sdpa_attention"],
        ratios=[1.4, 1.5, 1.45],
        speedup=1.45,
        ci_low=1.3,
        ci_high=1.6,
        verified=True,
        promoted=True,
    )
    round_ = RoundResult(
        round=1,
        run_dir="/runs/r1/run",
        contract_hash="h",
        trials=8,
        oom_trials=1,
        search_cost_s=60.0,
        promoted=True,
        winner=winner,
        decision="c1 promoted",
        compared="harness_step_time_s",
        report_html="/runs/r1/run/report.html",
        report_md="/runs/r1/run/report.md",
    )
    result = OptimizeResult(
        run_dir="/runs/r1/run",
        promoted=True,
        winner=winner,
        baseline={"knobs": {"micro_batch": 2, "nproc": 2}, "step_time_s": 0.03, "mfu_pct": 3.6},
        trials=8,
        oom_trials=1,
        cumulative_speedup=1.45,
        rounds=[round_],
        wall_s=300.0,
    )
    lines = headline(result)
    assert lines[0].startswith("baseline: steady step 0.0300 s (step_time_s)")
    assert lines[-3] == "round 1: promoted micro_batch=4 +sdpa_attention (8 search trials, 1 OOM)"
    assert "1.450x [1.300, 1.600] on harness_step_time_s over 3 interleaved rounds" in lines[-2]
    assert lines[-1] == "  report: /runs/r1/run/report.html; patch: /runs/r1/run/winner.patch"


def test_a_trial_line_names_each_time_and_shows_only_what_changed():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "run"))
    from test_objective import _record

    from infrarsi.cli.optimize import _line
    from infrarsi.events import TrialEnded
    from infrarsi.store import StoredTrial

    record = _record(0.0212, 0.0)
    trial = StoredTrial(
        id=4,
        run_id="r1",
        seq=3,
        config_json={"knobs": dict(record.knobs), "patches": []},
        status=record.status,
        started_unix_s=record.started_unix_s,
        record=record,
    )
    line = _line(
        TrialEnded(
            trial=trial, changes="micro_batch=4 +sdpa_attention", ranked_time_per_step_s=0.742
        )
    )
    assert line == (
        "  trial 3: micro_batch=4 +sdpa_attention -> ok: end to end "
        f"{record.metrics.e2e_time_s:.2f} s, steady step 0.0212 s, ranked 0.7420 s/step"
    )
    assert "\n" not in line


def test_a_json_answer_is_the_whole_of_stdout_though_a_thread_prints_after_it():
    """What Ray's driver does when a host is lost (its raylet log, printed to stdout from a
    thread of its own, after the command has answered): the print lands on stderr."""
    script = (
        "import threading, time, sys\n"
        "from infrarsi.cli.answer import keep_stdout_for_the_answer, print_answer\n"
        "answer = keep_stdout_for_the_answer()\n"
        "print('progress before the answer')\n"
        "late = threading.Thread(target=lambda: (time.sleep(0.3), print('raylet log')))\n"
        "late.start()\n"
        "print_answer('{\"trials\": 3}', answer)\n"
        "late.join()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"trials": 3}
    assert done.stderr.splitlines() == ["progress before the answer", "raylet log"]


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["doctor", "nope.yaml"],
        ["run", "nope.yaml", "--searcher", "nope"],
        ["apply", "nope"],
        ["verify", "nope"],
        ["bank", "stats"],
    ],
)
def test_a_command_that_reads_no_weight_starts_without_torch_or_scipy(tmp_path, args):
    """The CLI is the harness's own process: it imports PyTorch where it reads weights or
    measures the hardware and scipy where it takes a quantile, not to parse its arguments
    (both once cost ~2 s of every command's start). Read from Python's own import log."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "infrarsi", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "infrarsi.cli" in imported  # the log is read
    assert not imported & {"torch", "scipy.stats", "sklearn", "optuna"}, result.stderr[-2000:]


def test_the_shared_options_reach_a_command_as_their_typed_objects(monkeypatch):
    """``run``, ``optimize`` and ``apply`` declare ``bank``, ``proposer`` and ``executor`` once
    (``cli.options.grouped``): Typer shows each group's flags, and the command gets the
    objects they build."""
    import infrarsi.cli.optimize as screen
    from infrarsi import cli
    from infrarsi.options import BankOptions, ExecutorOptions, LLMBudget, ProposerOptions

    seen = {}
    monkeypatch.setattr(
        screen, "optimize_command", lambda *args, **kwargs: seen.update(args=args, **kwargs)
    )
    args = ["optimize", "dense-1node", "go faster", "--no-bank", "--bank", "b.sqlite"]
    args += ["--proposer", "catalog", "--llm-max-calls", "2", "--executor", "ray"]
    args += ["--ray-address", "h:1", "--parallel", "2", "--seed", "7"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    options = seen["args"][2]
    assert options.bank == BankOptions(url="b.sqlite", use=False)
    assert options.proposer == ProposerOptions(
        kind="catalog", llm_budget=LLMBudget(calls=2, tokens=400_000, seconds=1800.0)
    )
    assert options.executor == ExecutorOptions(kind="ray", ray_address="h:1")
    assert options.search.parallel == 2 and options.search.seed == 7
    for command in ("run", "optimize", "apply"):
        shown = CliRunner().invoke(cli.app, [command, "--help"], terminal_width=200).output
        assert "--no-bank" in shown and "--ray-address" in shown
