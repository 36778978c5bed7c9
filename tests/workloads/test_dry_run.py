"""The draft's dry run runs the user's code as a trial runs: a private home, each rank's memory
capped, and no process of it left behind (real processes; no PyTorch, so it is quick)."""

import os
import textwrap
from pathlib import Path

import psutil
import pytest

from infrarsi.draft.dry import DryRunError, dry_run

STRAY = "3600.125"


def script(folder: Path, body: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "train.py").write_text(textwrap.dedent(body))
    return folder


def test_the_dry_run_has_a_home_of_its_own_and_leaves_no_process(tmp_path):
    folder = script(
        tmp_path / "job",
        f"""
        import os, subprocess
        subprocess.Popen(["sleep", "{STRAY}"], start_new_session=True)  # outlives the script
        print("home", os.environ["HOME"], flush=True)
        for i in range(3):
            print(f"step {{i}} loss {{3 - i}}", flush=True)
        """,
    )
    lines, wall_s, observed = dry_run(["python", "train.py"], folder, timeout_s=60)
    assert observed == []  # no PyTorch: nothing for the observer to see
    text = [line for _, line, _ in lines]
    assert text[1:] == ["step 0 loss 3", "step 1 loss 2", "step 2 loss 1"]
    home = text[0].split()[1]
    assert home != os.environ.get("HOME") and "infrarsi-dry-" in home
    assert all(t >= 0 for t, _, _ in lines) and wall_s > 0
    left = [p for p in psutil.process_iter(["cmdline"]) if STRAY in (p.info["cmdline"] or [])]
    assert not left, "a process of the dry run outlived it"


def test_a_script_past_its_memory_cap_ends_the_dry_run_with_what_it_printed(tmp_path):
    folder = script(
        tmp_path / "job",
        """
        print("allocating", flush=True)
        block = bytearray(512 << 20)
        print("allocated", flush=True)
        """,
    )
    with pytest.raises(DryRunError, match="ended with exit") as failed:
        dry_run(["python", "train.py"], folder, timeout_s=60, mem_cap_bytes=128 << 20)
    said = str(failed.value)
    assert "MemoryError" in said or "past the dry run's cap of 128 MiB per rank" in said
    assert "allocated" not in str(failed.value).split("allocating")[-1]


def test_a_script_that_prints_nothing_before_the_limit_is_named(tmp_path):
    folder = script(tmp_path / "job", "import time\ntime.sleep(30)\n")
    with pytest.raises(DryRunError, match="printed nothing in 2 s"):
        dry_run(["python", "train.py"], folder, timeout_s=2)


def test_a_script_that_logs_its_steps_is_drafted_to_read_standard_error_too(tmp_path):
    """Python's logging writes to standard error: the dry run keeps each line's stream, and
    the draft reads the steps there when standard output has none."""
    from infrarsi.draft.assemble import _metrics

    folder = script(
        tmp_path / "job",
        """
        import logging, sys, time
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
        print("starting", flush=True)
        for i in range(4):
            time.sleep(0.05)
            logging.info("step %d | loss %.3f", i, 3 - i / 10)
        """,
    )
    printed = dry_run(["python", "train.py"], folder, timeout_s=60).lines
    assert {stream for _, _, stream in printed} == {"stdout", "stderr"}
    lines, metrics, notes = _metrics(printed, 4)
    assert metrics["read_stderr"] is True and "standard error" in notes[0]
    assert "step_time" not in metrics  # no time printed: timed by the lines' arrival
    assert len(lines) == 5


def test_gloos_teardown_race_alone_does_not_fail_the_dry_run(tmp_path):
    """A rank that trained every step and aborted as its process ended ("terminate called
    without an active exception", no Python error): the dry run reads what it printed, as a
    trial is classified by its steps; a Python error before such an abort still fails."""
    race = """
        import os, sys
        for i in range(3):
            print(f"step {i} loss {3 - i}", flush=True)
        sys.stderr.write("terminate called without an active exception\\n")
        sys.stderr.flush()
        os.abort()
        """
    lines = dry_run(["python", "train.py"], script(tmp_path / "race", race), timeout_s=60).lines
    assert [text for _, text, stream in lines if stream == "stdout"][-1] == "step 2 loss 1"
    error = race.replace("os.abort()", "raise SystemError('boom')")
    with pytest.raises(DryRunError, match="ended with exit"):
        dry_run(["python", "train.py"], script(tmp_path / "error", error), timeout_s=60)
