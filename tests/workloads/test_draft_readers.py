"""Reading a user's command and script for a manifest draft (issue 39's first part, pure): the
launcher, the script and what it was given; the arguments the script declares, from its source
without running it."""

from pathlib import Path

import pytest

from infrarsi.workloads.draft.arguments import read_arguments
from infrarsi.workloads.draft.command import CommandError, Given, parse_command

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


@pytest.mark.parametrize(
    "argv, why",
    [
        ([], "after --"),
        (["bash", "run.sh"], "python or torchrun"),
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
