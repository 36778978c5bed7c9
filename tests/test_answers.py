"""Bad files, filesystem faults and a busy folder, met through the command line as a user
meets them: each is one answer naming the path and the fix, exit 2 for input the user changes
and exit 4 for the machine refusing (a read-only or full disk), never a traceback."""

import os
import shutil

import pytest
import yaml
from conftest import FIXTURES, run_cli

from infrarsi.folder_lock import holding


def _answered(result, code: int, *said: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    for text in said:
        assert text in " ".join(result.stderr.split()), result.stderr[-2000:]


def _unwritable(folder: str) -> bool:
    try:
        os.mkdir(os.path.join(folder, ".infrarsi-probe"))
    except OSError:
        return True
    os.rmdir(os.path.join(folder, ".infrarsi-probe"))
    return False


@pytest.fixture
def junk(tmp_path):
    """A binary file, a folder and a plain file, where a user might give each."""
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "binary.diff").write_bytes(b"\xff\xfe" + bytes(range(200)))
    (tmp_path / "folder.yaml").mkdir()
    (tmp_path / "plain").write_text("not a folder\n")
    return tmp_path


@pytest.mark.parametrize(
    "args, code, said",
    [
        (("doctor", "binary.yaml"), 2, ["binary.yaml: not a text file"]),
        (("doctor", "folder.yaml"), 2, ["folder.yaml: is a folder, not a file"]),
        (("validate", "binary.yaml"), 2, ["binary.yaml: not a text file"]),
        (
            ("trial", "dense-1node", "--patch", "binary.diff"),
            2,
            ["binary.diff: not a text file", "a patch is a unified diff"],
        ),
        (
            ("init", "dense-1node", "cut time", "--yes", "-o", "missing/c.yaml"),
            2,
            ["missing/c.yaml: no such file or folder", "a folder to write into must exist"],
        ),
        (
            ("init", "dense-1node", "cut time", "--yes", "-o", "plain/c.yaml"),
            2,
            ["plain/c.yaml: a part of this path is a file"],
        ),
        pytest.param(
            ("init", "dense-1node", "cut time", "--yes", "-o", "/sys/c.yaml"),
            4,
            ["/sys/c.yaml: ", "choose a folder you can write"],
            marks=pytest.mark.skipif(not _unwritable("/sys"), reason="/sys is writable here"),
        ),
        (
            ("init", "dense-1node", "cut time", "--yes", "-o", "/dev/full"),
            4,
            ["no space left on the device"],
        ),
        (("bank", "import", "binary.yaml", "--bank", "b.sqlite"), 2, ["not a bank export"]),
        (("run", "c.yaml", "--budget", str(2**64)), 2, ["--budget"]),
    ],
)
def test_a_bad_file_or_path_is_an_answer(junk, args, code, said):
    _answered(run_cli(*args, cwd=junk), code, *said)


def test_a_junk_bank_export_is_refused_by_its_entries(tmp_path):
    (tmp_path / "x.json").write_text('{"format": "infrarsi-bank", "experiences": [{"a": 1}]}')
    result = run_cli("bank", "import", "x.json", "--bank", "b.sqlite", cwd=tmp_path)
    _answered(result, 2, "a bank export whose entries cannot be read")


@pytest.mark.skipif(not _unwritable("/sys"), reason="/sys is writable here")
def test_a_home_that_cannot_be_written_names_the_bank_options(tmp_path):
    """The default bank lives under HOME; a HOME the tool cannot write (here /sys, which the
    kernel refuses to create files in) is answered with the options that avoid it."""
    result = run_cli(
        "optimize", "dense-1node", "cut time", "--yes", "--budget", "1", "--out", "o",
        cwd=tmp_path, env={"HOME": "/sys", "MPLCONFIGDIR": str(tmp_path), "INFRARSI_BANK": ""},
    )  # fmt: skip
    _answered(result, 4, "error: /sys/.", "HOME (/sys)", "--no-bank")
    assert not list(tmp_path.glob("o/round-*"))  # refused before anything ran


def test_a_second_run_on_a_folder_in_use_is_refused_before_its_doctor(tmp_path):
    out = tmp_path / "out"
    with holding(out):  # another run holds it (this process, for the test)
        result = run_cli(
            "optimize", "dense-1node", "cut time", "--yes", "--no-bank", "--out", str(out),
            cwd=tmp_path,
        )  # fmt: skip
        _answered(result, 2, "is in use by another run", f"pid {os.getpid()}", "--out")
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # no Doctor wrote there
    with holding(out):  # released, it is taken again
        pass


DIVERGES = """
import argparse, torch
p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=4)
p.add_argument("--grad-accum", type=int, default=2)
p.add_argument("--max-steps", type=int, default=6)
a = p.parse_args()
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(a.max_steps):
    for _ in range(a.grad_accum):
        loss = model(torch.randn(a.batch_size, 4)).mean() * float("nan")
        loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step} loss {loss.item()}", flush=True)
"""
HANGS = DIVERGES.replace('* float("nan")', "").replace(
    'print(f"step', 'import time; time.sleep(3600) if step == 2 else None; print(f"step'
)
COMMAND = ("python", "train.py", "--batch-size", "4", "--grad-accum", "2", "--max-steps", "6")


@pytest.mark.parametrize(
    "script, said",
    [
        (DIVERGES, ["the loss was nan at optimizer step 0", "diverges"]),
        pytest.param(
            HANGS,
            ["did not end within 12 s", "stepped 3 time(s)", "a hang"],
            marks=pytest.mark.slow,  # waits out its timeout
        ),
    ],
    ids=["nan", "hang"],
)
def test_a_dry_run_that_diverges_or_hangs_is_named_so(tmp_path, script, said):
    (tmp_path / "train.py").write_text(script)
    # 12 s: the three steps before the hang take ~4 s here (PyTorch's imports), twice that loaded
    result = run_cli("manifest", "draft", "--yes", "--timeout", "12", "--", *COMMAND, cwd=tmp_path)
    _answered(result, 2, *said)
    assert "print one line per optimizer step" not in result.stderr  # not a print format


def test_a_patch_that_does_not_apply_and_a_lock_on_nothing_are_refused_before_a_trial(tmp_path):
    diff = tmp_path / "stale.diff"
    diff.write_text(
        "--- a/model.py\n+++ b/model.py\n@@ -1,3 +1,3 @@\n-no such line here\n"
        "+replaced\n context that is not there\n context either\n"
    )
    result = run_cli("trial", "dense-1node", "--patch", str(diff), cwd=tmp_path)
    _answered(result, 2, "patch stale.diff does not apply to dense-1node", "git diff")
    assert not (tmp_path / ".infrarsi").exists()  # no trial was started
    folder = tmp_path / "job"
    shutil.copytree(FIXTURES / "foreign", folder)
    raw = yaml.safe_load((folder / "workload.yaml").read_text())
    raw["files"]["locked"] = ["train_lm.py", "dataset.py"]
    raw["files"]["editable"] = ["../outside.py"]
    (folder / "workload.yaml").write_text(yaml.safe_dump(raw))
    checked = run_cli("validate", str(folder), cwd=tmp_path)
    _answered(
        checked, 2, "field 'files.locked.1': 'dataset.py' matches no file",
        "field 'files.editable.0': '../outside.py' is outside the workload folder",
    )  # fmt: skip


def test_an_interrupted_optimize_says_the_commands_that_go_on(tmp_path):
    from infrarsi.cli.optimize import how_to_resume

    assert "run the same optimize command again" in how_to_resume(tmp_path)
    for r in (1, 2, 10):
        (tmp_path / f"round-{r}" / "run").mkdir(parents=True)
        (tmp_path / f"round-{r}" / "run" / "run.json").write_text("{}")
    said = how_to_resume(tmp_path)
    last = tmp_path / "round-10" / "run"
    assert f"infrarsi run --resume {last}" in said and f"infrarsi apply {last}" in said


def test_a_search_on_a_contract_never_doctored_is_warned_first(tmp_path):
    made = run_cli("init", str(FIXTURES / "toy"), "cut time", "--yes", "-o", "c.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    result = run_cli("run", "c.yaml", "--budget", "1", "--no-bank", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    said = " ".join(result.stderr.split())
    assert "warning: this contract was never doctored" in said
    assert "infrarsi doctor c.yaml" in said


def test_validate_refuses_a_baseline_its_own_constraints_refuse_as_init_does(tmp_path):
    folder = tmp_path / "job"
    shutil.copytree(FIXTURES / "foreign", folder)
    raw = yaml.safe_load((folder / "workload.yaml").read_text())
    raw["constraints"] = [{"expr": "batch_size * accum == 999", "why": "a typo"}]
    (folder / "workload.yaml").write_text(yaml.safe_dump(raw))
    said = "constraint 'batch_size * accum == 999' fails with accum=2, batch_size=4"
    _answered(run_cli("validate", str(folder), cwd=tmp_path), 2, said)
    made = run_cli("init", str(folder), "cut time", "--yes", "-o", "c.yaml", cwd=tmp_path)
    _answered(made, 2, said)
