"""Bad files, filesystem faults and a busy folder, met through the command line as a user
meets them: each is one answer naming the path and the fix, exit 2 for input the user changes
and exit 4 for the machine refusing (a read-only or full disk), never a traceback."""

import os

import pytest
from conftest import run_cli

from infrarsi.folder_lock import holding


def _answered(result, code: int, *said: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    for text in said:
        assert text in " ".join(result.stderr.split()), result.stderr[-2000:]


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


def _unwritable(folder: str) -> bool:
    try:
        os.mkdir(os.path.join(folder, ".infrarsi-probe"))
    except OSError:
        return True
    os.rmdir(os.path.join(folder, ".infrarsi-probe"))
    return False


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
