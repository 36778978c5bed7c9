"""Reading a user's command and script for a manifest draft (issue 39's first part, pure): the
launcher, the script and what it was given; the arguments the script declares, from its source
without running it."""

from pathlib import Path

import pytest

from infrarsi.draft.arguments import read_arguments
from infrarsi.draft.command import CommandError, Given, parse_command

FOREIGN = Path(__file__).resolve().parents[1] / "fixtures" / "foreign" / "train_lm.py"


def test_a_python_command_and_a_torchrun_command_are_read_apart():
    c = parse_command(["python", "-u", "train.py", "--batch_size=12", "--bf16", "--lr", "3e-4"])
    assert (c.launcher, c.script) == ("python", "train.py")
    assert c.given == (Given("--batch_size", "12"), Given("--bf16", None), Given("--lr", "3e-4"))
    t = parse_command(
        ["torchrun", "--standalone", "--nproc-per-node", "2", "train.py", "--steps", "-1"]
    )
    assert t.launcher == "torchrun" and t.nproc() == 2 and t.script == "train.py"
    assert t.launcher_options["--standalone"] is None
    assert t.given == (Given("--steps", "-1"),)  # a negative number is a value
    assert parse_command(["torchrun", "--nproc_per_node=4", "x.py"]).nproc() == 4
    m = parse_command(["python", "-m", "torch.distributed.run", "--nproc_per_node=2", "x.py"])
    assert m.launcher == "torchrun" and m.nproc() == 2 and m.script == "x.py"


def test_an_accelerate_launch_is_read_apart_with_its_ranks():
    a = parse_command(
        ["accelerate", "launch", "--cpu", "--num_processes", "2", "--mixed_precision", "no"]
        + ["train.py", "--accum", "2"]
    )
    assert (a.launcher, a.script, a.nproc()) == ("accelerate", "train.py", 2)
    assert a.launcher_options == {"--cpu": None, "--num_processes": "2", "--mixed_precision": "no"}
    assert a.given == (Given("--accum", "2"),)
    assert parse_command(["accelerate", "launch", "--num-processes=3", "x.py"]).nproc() == 3
    assert parse_command(["accelerate", "launch", "x.py"]).nproc() is None


@pytest.mark.parametrize(
    "argv, why",
    [
        ([], "after --"),
        (["bash", "run.sh"], "python, torchrun or accelerate launch"),
        (["accelerate", "launch", "-m", "pkg.train"], "script's path"),
        (["python", "-m", "pkg.train"], "script's path"),
        (["python", "notes.txt"], "no script"),
    ],
)
def test_a_command_without_a_script_is_refused_with_the_fix(argv, why):
    with pytest.raises(CommandError, match=why):
        parse_command(argv)


def test_argparse_arguments_are_read_from_the_source_without_running_it():
    args = {a.dest: a for a in read_arguments(FOREIGN.read_text())}
    assert {"batch_size", "accum", "iters", "attn", "bf16", "threads", "seed"} <= set(args)
    assert args["batch_size"].type == "int" and args["batch_size"].default == 4
    assert args["batch_size"].options == ("--batch-size",)
    assert args["attn"].choices == ("math", "sdpa") and args["attn"].type == "str"
    assert args["bf16"].switch and args["bf16"].type == "bool" and args["bf16"].default is False


def test_configurator_globals_are_the_settings_of_a_nanogpt_style_script():
    source = (
        "batch_size = 12\ngradient_accumulation_steps = 40\ndtype = 'bfloat16'\n"
        "compile = True\nlearning_rate = 6e-4\n"
        "exec(open('configurator.py').read())\nlater = 1\n"
    )
    args = {a.dest: a for a in read_arguments(source)}
    assert set(args) == {
        "batch_size",
        "gradient_accumulation_steps",
        "dtype",
        "compile",
        "learning_rate",
    }
    assert args["compile"].type == "bool" and args["learning_rate"].type == "float"
    assert args["batch_size"].options == ("--batch_size",)


@pytest.mark.parametrize(
    "name, kind, role",
    [
        ("batch_size", "int", "micro_batch"),
        ("per_device_train_batch_size", "int", "micro_batch"),
        ("per_device_eval_batch_size", "int", None),
        ("gradient_accumulation_steps", "int", "grad_accum"),
        ("accum", "int", "grad_accum"),
        ("bf16", "bool", "precision"),
        ("dtype", "str", "precision"),
        ("torch_compile", "bool", "compile"),
        ("compile", "bool", "compile"),
        ("gradient_checkpointing", "bool", "activation_checkpointing"),
        ("dataloader_num_workers", "int", "data"),
        ("optim", "str", "optimizer"),
        ("threads", "int", "threads"),
        ("attn", "str", "attention"),
        ("learning_rate", "float", None),
        ("batch_size", "str", None),  # a batch size that is not a number is no micro-batch
        ("per_device_batch", "int", "micro_batch"),
        ("per_gpu_batch_size", "int", "micro_batch"),
        ("device_batch_size", "int", "micro_batch"),
        ("batch_size_per_device", "int", "micro_batch"),
        ("micro_bs", "int", "micro_batch"),
        ("global_batch_size", "int", None),  # the job's batch, which the search keeps
    ],
)
def test_roles_are_read_from_the_names_scripts_use(name, kind, role):
    from infrarsi.draft.arguments import ScriptArg
    from infrarsi.draft.roles import role_of

    assert role_of(ScriptArg(name, (f"--{name}",), kind)) == role


@pytest.mark.parametrize(
    "name, help_text, role",
    [
        ("ga", "number of gradient accumulation steps", "grad_accum"),
        ("chunks", "micro-batches per optimizer step", "grad_accum"),
        ("mb", "micro-batch size", "micro_batch"),
        ("bsz", "batch size per device", "micro_batch"),
        ("pdb", "per-device training batch size", "micro_batch"),
        ("nw", "number of dataloader workers", "data"),
        ("nt", "intra-op threads", "threads"),
        ("ebs", "micro-batch size for evaluation", None),  # evaluation-only, by its help
        ("n", "gradient accumulation steps", "grad_accum"),
        ("train_steps", "steps, each of several micro-batches", None),  # the step count
        ("lr", "learning rate", None),
    ],
)
def test_a_role_the_name_does_not_say_is_read_from_the_help_text(name, help_text, role):
    from infrarsi.draft.arguments import ScriptArg
    from infrarsi.draft.roles import role_of

    assert role_of(ScriptArg(name, (f"--{name}",), "int", help=help_text)) == role


def test_the_steps_seed_and_logging_arguments_are_recognised():
    from infrarsi.draft.arguments import ScriptArg
    from infrarsi.draft.roles import is_log_every, is_seed, is_steps

    assert all(is_steps(ScriptArg(n, (), "int")) for n in ("max_iters", "max_steps", "iters"))
    assert not is_steps(ScriptArg("warmup_steps", (), "int"))
    assert is_seed(ScriptArg("seed", (), "int")) and is_seed(ScriptArg("data_seed", (), "int"))
    assert is_log_every(ScriptArg("logging_steps", (), "int"))
    assert is_log_every(ScriptArg("log_interval", (), "int"))


def _lines(texts, every_s=0.05):
    return [(i * every_s, t) for i, t in enumerate(texts)]


def test_the_step_line_its_loss_and_its_time_in_the_printed_unit():
    from infrarsi.draft.metrics import read_metrics
    from infrarsi.workloads.stdout import StdoutMetrics

    lines = _lines(
        ["tokens per iter: 256"] + [f"iter {i}: loss 2.{i}1, time 41.{i}ms" for i in range(4)]
    )
    metrics, notes = read_metrics(lines, 4)
    spec = StdoutMetrics.model_validate(metrics)  # what a manifest holds
    assert spec.step_time.unit == "ms" and spec.tokens_per_step is not None
    from infrarsi.trial.metrics import read_stdout

    steps = read_stdout("\n".join(t for _, t in lines), spec)[0].steps
    assert [s["step_time_s"] for s in steps] == pytest.approx([0.0410, 0.0411, 0.0412, 0.0413])
    assert [s["loss"] for s in steps] == pytest.approx([2.01, 2.11, 2.21, 2.31])
    assert not notes


def test_a_unit_not_printed_is_read_from_the_clock():
    from infrarsi.draft.metrics import read_metrics

    ms = [f"step {i} | loss {3 - i:.2f} | time {250 + i}" for i in range(3)]
    metrics, notes = read_metrics(_lines(ms, every_s=0.25), 3)
    assert metrics["step_time"]["unit"] == "ms" and "from the clock" in notes[0]
    s = [f"step {i} | loss {3 - i:.2f} | time {0.25 + i / 100}" for i in range(3)]
    assert read_metrics(_lines(s, every_s=0.25), 3)[0]["step_time"]["unit"] == "s"


def test_hugging_face_log_dicts_are_timed_by_their_arrival():
    from infrarsi.draft.metrics import LOSS_PATTERNS, read_metrics
    from infrarsi.trial.metrics import read_stdout
    from infrarsi.workloads.stdout import StdoutMetrics

    hf = [f"{{'loss': '{2.5 - i / 10:.4f}', 'grad_norm': 1.2, 'epoch': 0.{i}}}" for i in range(3)]
    hf.append("{'train_runtime': 1.9, 'train_loss': 2.4, 'epoch': 1.0}")  # the summary: no step
    assert len(__import__("re").findall(LOSS_PATTERNS[0], "\n".join(hf))) == 3
    metrics, notes = read_metrics(_lines(hf, every_s=0.25), 3)
    spec = StdoutMetrics.model_validate(metrics)
    assert spec.step_time is None and spec.step_line == spec.loss.pattern
    assert "timed by the harness's clock" in notes[0]
    arrivals = [10.0, 10.3, 10.5]  # when the harness saw the three loss lines
    steps = read_stdout("\n".join(hf), spec, arrivals)[0].steps
    assert [s["step_time_s"] for s in steps] == pytest.approx([0.25, 0.3, 0.2])
    assert [s["loss"] for s in steps] == pytest.approx([2.5, 2.4, 2.3])


def test_a_loop_of_max_iters_plus_one_with_evaluation_lines_beside_is_read():
    """nanoGPT as published: ``max_iters=6`` runs iterations 0 to 6 (seven optimizer steps),
    and its evaluation prints ``step 0: train loss ..., val loss ...`` beside the step lines:
    the step lines are told apart by the words before their loss, the extra step counted."""
    from infrarsi.draft.metrics import read_metrics
    from infrarsi.trial.metrics import read_stdout
    from infrarsi.workloads.stdout import StdoutMetrics

    printed = ["tokens per iteration will be: 8,192", "step 0: train loss 4.2874, val loss 4.2823"]
    printed += [
        f"iter {i}: loss {4.26 - i / 10:.4f}, time {98 + i:.2f}ms, mfu -100.00%" for i in range(7)
    ]
    printed.append("step 6: train loss 3.7000, val loss 3.7500")
    metrics, notes = read_metrics(_lines(printed), 6)
    spec = StdoutMetrics.model_validate(metrics)
    assert spec.steps_offset == 1 and any("7 step lines for 6 steps" in n for n in notes)
    steps = read_stdout("\n".join(printed), spec)[0].steps
    assert [s["loss"] for s in steps] == pytest.approx([4.26 - i / 10 for i in range(7)])
    assert [s["step_time_s"] for s in steps] == pytest.approx([(98 + i) / 1000 for i in range(7)])


def test_a_bare_time_between_bars_and_progress_bar_lines_are_read():
    """An ``accelerate`` loop's ``accelerator.print``: ``step 3 | loss 5.01 | ppl 150.29 |
    32.3 ms``, beside a progress bar's own lines."""
    from infrarsi.draft.metrics import read_metrics

    printed = []
    for i in range(5):
        printed.append(f"{i + 1}/5 [00:0{i}<00:05, 3.2it/s]")
        printed.append(f"step {i} | loss {5.01 - i / 10:.2f} | ppl 150.29 | {32.3 + i:.1f} ms")
    metrics, _ = read_metrics(_lines(printed), 5)
    assert metrics["step_time"]["unit"] == "ms" and "steps_offset" not in metrics
    assert "|" in metrics["step_time"]["pattern"]


def test_arrivals_that_do_not_match_the_loss_lines_are_an_error():
    from infrarsi.trial.metrics import MetricsError, by_arrival

    assert by_arrival(None, 3) == [0.0, 0.0, 0.0]  # counting steps only
    assert by_arrival([1.0], 1) == [0.0]  # one step: nothing to time it by
    with pytest.raises(MetricsError, match="2 step lines arrived for 3 losses"):
        by_arrival([1.0, 2.0], 3)
    with pytest.raises(MetricsError, match="cannot be timed by their lines' arrival"):
        by_arrival([1.0, 1.0001, 1.0002, 1.0003], 4)  # read together, not as they ran


def test_a_run_that_prints_no_step_lines_says_what_to_print():
    from infrarsi.draft.metrics import MetricsDraftError, read_metrics

    with pytest.raises(MetricsDraftError, match="one line per optimizer step"):
        read_metrics(_lines(["starting", "done"]), 4)
    metrics, notes = read_metrics(_lines([f"loss {i}" for i in range(4)]), 4)
    assert "step_time" not in metrics and "no step time" in notes[0]
    with pytest.raises(MetricsDraftError, match="too close to time the steps"):
        read_metrics(_lines([f"loss {i}" for i in range(4)], every_s=0.0001), 4)


@pytest.mark.parametrize(
    "printed, count",
    [
        ("number of parameters: 10.65M", "1.065e+07"),
        ("  Number of trainable parameters = 124,439,808", "1.24440e+08"),
        ("model params: 85000", "85000"),
        ("num_params=2.5B", "2.5e+09"),
    ],
)
def test_flops_per_token_from_a_printed_parameter_count(printed, count):
    from infrarsi.draft.metrics import read_flops
    from infrarsi.workloads.manifest import Flops

    flops, note = read_flops(_lines(["starting", printed, "iter 0: loss 2.0"]))
    Flops.model_validate(flops)  # what a manifest holds
    assert flops["per_token"].startswith("6 * ")
    assert float(flops["per_token"][4:]) == pytest.approx(float(count), rel=1e-4)
    assert "from the printed count" in note


def test_no_parameter_count_leaves_flops_unknown_and_says_so():
    from infrarsi.draft.metrics import read_flops

    flops, note = read_flops(_lines(["iter 0: loss 2.0, time 4ms", "step_params: none"]))
    assert flops is None and "MFU will read 'not available'" in note


NANOGPT = """
\"\"\"Trains a GPT. Settings below are overridden by configurator.py (--key=value).\"\"\"
batch_size = 12
gradient_accumulation_steps = 40
block_size = 1024
max_iters = 600000
log_interval = 10
compile = True
dtype = 'bfloat16'
exec(open('configurator.py').read())
ddp_world_size = 2
gradient_accumulation_steps //= ddp_world_size
"""


def test_a_nanogpt_style_job_under_torchrun_keeps_its_accumulation_convention(tmp_path):
    from infrarsi.draft.command import parse_command
    from infrarsi.draft.draft import launch_command, plan, read_script

    (tmp_path / "train.py").write_text(NANOGPT)
    command = parse_command(
        ["torchrun", "--standalone", "--nproc_per_node=2", "train.py", "--batch_size=8"]
        + ["--max_iters=100", "--compile=False"]
    )
    draft = plan(read_script(command, tmp_path), cores=2)
    knobs = {k["name"]: k for k in draft.knobs}
    assert set(knobs) == {"nproc", "micro_batch", "grad_accum", "compile", "dtype"} | {
        "omp_num_threads"  # no threads argument: the environment's, unset at the baseline
    }
    assert knobs["omp_num_threads"]["values"] == [0, 1, 2]
    assert draft.baseline["omp_num_threads"] == 0
    assert draft.env == {"OMP_NUM_THREADS": "{omp_num_threads}"}
    assert knobs["dtype"]["values"] == ["bfloat16", "float32"]  # in the spelling given
    # the script divides its accumulation by the world size: the job's total is 8 x 40
    assert knobs["grad_accum"]["derive"] == "320 // (micro_batch)"
    assert {c["expr"] for c in draft.constraints} == {
        "micro_batch * grad_accum == 320",
        "grad_accum % nproc == 0",
    }
    # written out as the script reads it (a configurator's literal_eval): True/False, not 1/0
    assert knobs["compile"]["values"] == ["False", "True"]
    assert knobs["compile"]["default"] == "False"
    assert draft.params == {"steps": 100}
    command_line = launch_command(draft)
    assert command_line[:3] == ["torchrun", "--standalone", "--nproc-per-node={nproc}"]
    assert "--compile={compile}" in command_line and "--log_interval=1" in command_line
    assert "--max_iters={steps}" in command_line and "--batch_size={micro_batch}" in command_line


HF_SCRIPT = """
from dataclasses import dataclass, field
from transformers import HfArgumentParser, Trainer, TrainingArguments


@dataclass
class ModelArguments:
    block_size: int = field(default=128, metadata={"help": "sequence length"})
    n_layer: int = 2


parser = HfArgumentParser((ModelArguments, TrainingArguments))
model_args, training_args = parser.parse_args_into_dataclasses()
"""


def test_a_hugging_face_script_reads_its_dataclasses_and_the_training_arguments(tmp_path):
    from infrarsi.draft.command import CommandError, parse_command
    from infrarsi.draft.draft import launch_command, plan, read_script

    (tmp_path / "run_clm.py").write_text(HF_SCRIPT)
    argv = ["python", "run_clm.py", "--per_device_train_batch_size", "4"]
    argv += ["--gradient_accumulation_steps", "2", "--bf16", "--output_dir", "out"]
    with pytest.raises(CommandError, match="--max_steps"):  # trains by epochs unless given
        plan(read_script(parse_command(argv), tmp_path), cores=2)
    draft = plan(read_script(parse_command([*argv, "--max_steps", "20"]), tmp_path), cores=2)
    knobs = {k["name"]: k for k in draft.knobs}
    assert knobs["micro_batch"]["values"] == [1, 2, 4, 8] and knobs["micro_batch"]["default"] == 4
    assert knobs["bf16"] == {
        "name": "bf16",
        "role": "precision",
        "type": "bool",
        "flag": "--bf16",
        "default": True,
    }
    assert {"torch_compile", "gradient_checkpointing", "dataloader_num_workers", "optim"} <= set(
        knobs
    )
    assert "fp16" not in knobs  # one precision knob
    assert draft.params == {"steps": 20, "seed": 42}
    command = launch_command(draft)
    assert "--output_dir=out" in command and "--logging_steps=1" in command
    assert "--per_device_train_batch_size={micro_batch}" in command


ACCELERATE = """
import argparse
from accelerate import Accelerator
from torch.utils.data import DataLoader

parser = argparse.ArgumentParser()
parser.add_argument("--chunk", type=int, default=4)
parser.add_argument("--every", type=int, default=2)
parser.add_argument("--mixed-precision", type=str, default="no")
parser.add_argument("--seq", type=int, default=64)
parser.add_argument("--max-steps", type=int, default=20)
parser.add_argument("--eval-batch", type=int, default=16)
args = parser.parse_args()
accelerator = Accelerator(
    gradient_accumulation_steps=args.every, mixed_precision=args.mixed_precision
)
train = DataLoader(range(100), batch_size=args.chunk, shuffle=True)
held_out = DataLoader(range(10), batch_size=args.eval_batch)
"""


def test_roles_are_read_from_how_the_script_uses_its_arguments(tmp_path):
    """An ``accelerate`` loop as the library's examples write it: the batch its DataLoader
    takes and the accumulation its Accelerator takes play those roles whatever they are
    called (here names and help texts that say nothing; an evaluation's batch size plays
    none); ``--seq`` is the sequence length."""
    from infrarsi.draft.command import parse_command
    from infrarsi.draft.draft import plan, read_script
    from infrarsi.draft.usage import roles_by_use

    assert roles_by_use(ACCELERATE, {"chunk", "every", "mixed_precision", "x"}) == {
        "every": ("grad_accum", "passed to Accelerator(gradient_accumulation_steps=...)"),
        "mixed_precision": ("precision", "passed to Accelerator(mixed_precision=...)"),
        "chunk": ("micro_batch", "passed to DataLoader(batch_size=...)"),
    }
    (tmp_path / "train.py").write_text(ACCELERATE)
    command = parse_command(["python", "train.py", "--chunk", "4", "--every", "2"])
    draft = plan(read_script(command, tmp_path), cores=2)
    knobs = {k["name"]: k["role"] for k in draft.knobs}
    assert knobs["micro_batch"] == "micro_batch" and knobs["grad_accum"] == "grad_accum"
    assert any("from how the script uses it" in n for n in draft.notes), draft.notes
    assert "eval_batch" not in knobs


def test_an_accelerate_launch_has_its_ranks_as_a_knob_and_multi_gpu_follows_them(tmp_path):
    """accelerate refuses --multi_gpu with one process: where the ranks are searched, the
    switch is derived from them; the launcher's port is the trial's own."""
    from infrarsi.draft.draft import launch_command, plan, read_script, render

    (tmp_path / "train.py").write_text(ACCELERATE)
    argv = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "train.py"]
    draft = plan(read_script(parse_command([*argv, "--chunk", "4", "--every", "2"]), tmp_path), 2)
    knobs = {k["name"]: k for k in draft.knobs}
    assert knobs["nproc"]["values"] == [1, 2] and knobs["nproc"]["default"] == 2
    assert knobs["multi_gpu"] == {
        "name": "multi_gpu",
        "role": "ranks",
        "type": "bool",
        "flag": "--multi_gpu",
        "derive": "nproc > 1",
    }
    command = launch_command(draft)
    assert command[:6] == [
        "accelerate",
        "launch",
        "--num_processes={nproc}",
        "--num_machines=1",
        "--main_process_port={rdzv_port}",
        "{multi_gpu}",
    ]
    assert "--multi_gpu" not in command
    assert render(command, draft, {"nproc": 1, "multi_gpu": False})[2] == "--num_processes=1"
    assert "--multi_gpu" in render(command, draft, {})  # the baseline's two processes
    kept = plan(read_script(parse_command([*argv, "--chunk", "4"]), tmp_path), 2, ranks=False)
    assert "nproc" not in {k["name"] for k in kept.knobs}
    assert launch_command(kept)[2] == "--num_processes=2" and "--multi_gpu" in launch_command(kept)


TRAINER_JOB = """
from transformers import Trainer, TrainingArguments
trainer = Trainer(model=None, args=TrainingArguments("out"), train_dataset=[], eval_dataset=[])
"""
OWN_TRAINER = """
import transformers
class MyTrainer(transformers.Trainer):
    pass
MyTrainer(model=None, eval_dataset=None).train()
"""
ACCELERATE_LOOP = "from accelerate import Accelerator\naccelerator = Accelerator()\n"


@pytest.mark.parametrize(
    "source, framework, held_out",
    [
        (TRAINER_JOB, "trainer", True),
        (OWN_TRAINER, "trainer", False),  # a Trainer of its own; eval_dataset=None is none
        (ACCELERATE_LOOP, "accelerate", False),
        (ACCELERATE, "accelerate", False),
        ("import torch\nTrainer = object\nTrainer()\n", None, False),  # not transformers'
        ("def broken(:\n", None, False),
    ],
)
def test_the_framework_a_script_is_written_on_is_read_from_its_source(source, framework, held_out):
    from infrarsi.draft.frameworks import framework_of, passes_eval_dataset

    assert framework_of(source) == framework
    assert passes_eval_dataset(source) is held_out


def test_a_trainer_jobs_evaluation_is_its_own_command_at_the_baselines_arguments():
    from infrarsi.draft.frameworks import evaluation

    launch = ["torchrun", "--standalone", "--nproc-per-node=2", "train.py", '--x={"a": 1}']
    how, note = evaluation("trainer", launch, "train.py", has_eval=True)
    assert how == {"framework": "trainer", "command": ["python", "train.py", '--x={{"a": 1}}']}
    assert "before and after Trainer.train" in note and "eval_dataset" in note
    how, note = evaluation("trainer", ["python", "t.py"], "t.py", has_eval=False)
    assert "training data" in note  # said: no held-out set to evaluate on
    how, note = evaluation("accelerate", ["python", "t.py"], "t.py", has_eval=False)
    assert how == {"framework": "accelerate"} and "no held-out loss is checked" in note


def test_the_draft_reads_the_world_size_line_the_framework_hook_writes():
    """The hook runs before any import of the package (standard library only), so the line
    it writes is spelt in two places: one spelling."""
    import importlib.util

    from infrarsi.draft import assemble
    from infrarsi.sandbox import HOOKS_DIR

    spec = importlib.util.spec_from_file_location("hook", HOOKS_DIR / "infrarsi_params.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    assert hook.WORLD_LINE == assemble.WORLD_LINE and hook.ENV == assemble.SAVE_PARAMS
    printed = [(0.1, "step 0 | loss 1.0", "stdout"), (0.2, f"{hook.WORLD_LINE}2", "stderr")]
    assert assemble._world(printed) == 2 and assemble._world(printed[:1]) is None


CLICK_SCRIPT = """
import click

@click.command()
@click.option("--rows-per-step", type=int, default=8, help="rows a step")
@click.option("-k", "--merge", "merge_every", default=2)
@click.option("--mixed/--no-mixed", default=False)
@click.option("--verbose", is_flag=True)
@click.option("--attn", type=click.Choice(["math", "sdpa"]), default="math")
def main(rows_per_step, merge_every, mixed, verbose, attn):
    pass
"""


def test_click_options_are_read_as_argparse_arguments_are():
    args = {a.dest: a for a in read_arguments(CLICK_SCRIPT)}
    assert set(args) == {"rows_per_step", "merge_every", "mixed", "verbose", "attn"}
    assert args["rows_per_step"].options == ("--rows-per-step",)
    assert args["rows_per_step"].type == "int" and args["rows_per_step"].default == 8
    assert args["merge_every"].options == ("-k", "--merge") and args["merge_every"].type == "int"
    assert args["verbose"].switch and args["verbose"].default is False
    assert args["mixed"].options == ("--mixed",) and not args["mixed"].switch
    assert args["attn"].choices == ("math", "sdpa") and args["attn"].type == "str"


LIGHTNING_FIT = """
import lightning as L
class M(L.LightningModule):
    def validation_step(self, batch, i):
        self.log("val_loss", self(batch))
L.Trainer().fit(M(), train_loader, {val})
"""


@pytest.mark.parametrize(
    "source, validates",
    [
        (LIGHTNING_FIT.format(val="val_loader"), True),  # a third argument
        (LIGHTNING_FIT.format(val="val_dataloaders=v"), True),
        (LIGHTNING_FIT.format(val="").replace(", )", ")"), False),  # no validation loader
        (LIGHTNING_FIT.format(val="v").replace("validation_step", "other"), False),
        (LIGHTNING_FIT.format(val="v").replace("self.log(", "print("), False),  # logs nothing
        (LIGHTNING_FIT.format(val="v").replace("lightning as L", "torch as L"), False),
        (LIGHTNING_FIT.format(val="").replace(", )", ")") + "def val_dataloader(s): pass\n", True),
    ],
)
def test_a_lightning_job_is_judged_by_its_validate_only_where_it_has_a_validation_loader(
    source, validates
):
    from infrarsi.draft.frameworks import lightning_validates

    assert lightning_validates(source) is validates
