"""The kernel's watch on a trial's files (``trial.filewatch``), driven by real processes doing
to the files what a rank may: the window's end is the last moment the bytes under the final
name can have changed, however they were put there (a placeholder written early and the real
parameters linked in, written through a second name, through a symlink or a writable mapping,
the folder swapped), and a first open is never timed later than it happened."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from infrarsi.trial.filewatch import POLL_S, FileWatch

LATER_S = 0.6  # the rank's real save comes this long after its placeholder

PLACEHOLDER = """
import os, sys, time
final = sys.argv[1]
other = sys.argv[2]
with open(final, "wb") as f:  # a placeholder under the final name, at import
    f.write(b"placeholder")
"""


def _rank(tmp_path: Path, body: str) -> float:
    """Run ``body`` as a rank would (its own process), with ``final`` and ``other`` (a folder
    the watch does not see); the moment, on the shared monotonic clock, its last change of the
    final bytes returned (the script prints it)."""
    other = tmp_path / "elsewhere"
    other.mkdir(exist_ok=True)
    final = tmp_path / "weights" / "final.pt"
    script = PLACEHOLDER + f"time.sleep({LATER_S})\n" + body + "\nprint(time.monotonic())\n"
    out = subprocess.run(
        [sys.executable, "-c", script, str(final), str(other)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.split()[-1])


def _watched(tmp_path: Path, body: str) -> tuple[FileWatch, float]:
    (tmp_path / "weights").mkdir()
    watch = FileWatch(tmp_path, [], tmp_path / "weights" / "final.pt")
    watch.start()
    done = _rank(tmp_path, body)
    watch.stop()
    return watch, done


def _end(watch: FileWatch) -> float:
    assert watch.moments.final_saved_s is not None, watch.moments
    return watch.t0 + watch.moments.final_saved_s


MOVES = {
    # what the harness's own save does: a temporary file renamed over the name
    "renamed in": """
with open(os.path.join(os.path.dirname(final), ".final.pt.tmp"), "wb") as f:
    f.write(b"real parameters")
os.replace(os.path.join(os.path.dirname(final), ".final.pt.tmp"), final)
""",
    # the real parameters written elsewhere, then hard-linked under the name (an IN_CREATE)
    "linked in": """
real = os.path.join(other, "real.pt")
with open(real, "wb") as f:
    f.write(b"real parameters")
os.unlink(final)
os.link(real, final)
""",
    # the placeholder's inode given a second name elsewhere, the real bytes written through it
    "written through a second name": """
os.link(final, os.path.join(other, "twin.pt"))
time.sleep(0.05)
with open(os.path.join(other, "twin.pt"), "r+b") as f:
    f.write(b"real parameters")
""",
    # a writable mapping of the file through another name
    "written through a mapping": """
import mmap
os.link(final, os.path.join(other, "mapped.pt"))
with open(os.path.join(other, "mapped.pt"), "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[:4] = b"real"
    m.flush()
    m.close()
""",
}


@pytest.mark.parametrize("move", sorted(MOVES))
def test_the_end_is_the_last_change_of_the_final_bytes_however_they_got_there(tmp_path, move):
    watch, done = _watched(tmp_path, MOVES[move])
    assert _end(watch) >= done - 0.01, (move, _end(watch) - done)
    assert _end(watch) >= watch.t0 + LATER_S  # never the placeholder's moment
    assert _end(watch) <= done + 1.0  # and not the whole test's length either
    assert watch.moments.lag_s <= 0.5


def test_a_symlink_to_bytes_written_later_ends_when_they_were_written(tmp_path):
    body = """
real = os.path.join(other, "real.pt")
with open(real, "wb") as f:
    f.write(b"x")
os.unlink(final)
os.symlink(real, final)
time.sleep(0.3)
with open(real, "wb") as f:  # no event in the watched folder: the target's change time tells
    f.write(b"real parameters")
"""
    watch, done = _watched(tmp_path, body)
    assert _end(watch) >= done - 0.01


def test_a_folder_swapped_leaves_the_end_unknown(tmp_path):
    body = """
folder = os.path.dirname(final)
os.rename(folder, os.path.join(other, "old"))
os.mkdir(folder)
with open(final, "wb") as f:
    f.write(b"real parameters")
"""
    watch, _ = _watched(tmp_path, body)
    assert watch.moments.final_saved_s is None
    assert "moved or deleted" in watch.moments.problem


def test_a_first_open_is_timed_no_later_than_it_happened(tmp_path):
    module = tmp_path / "model.py"
    module.write_text("x = 1\n")
    watch = FileWatch(tmp_path, [module], None)
    watch.start()
    time.sleep(0.3)
    before = time.monotonic()
    module.read_text()
    time.sleep(0.2)
    watch.stop()
    opened = watch.t0 + watch.moments.first_open_s["model.py"]
    assert opened <= before + 0.005  # the start of the read's interval: never late
    assert opened >= before - POLL_S - 0.25  # and within the reader's interval of it
    assert watch.moments.final_saved_s is None
