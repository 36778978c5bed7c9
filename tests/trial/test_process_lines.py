"""How the harness reads a launcher's output: a line ends at a newline or at a carriage return,
so each rewrite of a progress bar is read as it is written (its arrival is the step's, by the
harness's clock), not all together when the bar ends."""

import statistics
import sys
import textwrap

from infrarsi.sandbox.process import Launchers, line_parts, run_isolated
from infrarsi.trial.watch import MetricsChannel


def test_a_line_ends_at_a_newline_or_a_carriage_return_and_the_rest_waits():
    assert line_parts(b"a\r 10% loss 2\rstep 1 loss 2\nrest") == (
        [b"a\r", b" 10% loss 2\r", b"step 1 loss 2\n"],
        b"rest",
    )
    assert line_parts(b"x\r\ny") == ([b"x\r", b"\n"], b"y")  # CRLF: an empty second line
    assert line_parts(b"no end yet") == ([], b"no end yet")
    assert line_parts(b"") == ([], b"")


BAR = textwrap.dedent(
    """
    import sys, time
    sys.stdout.write("tokens per step: 64\\n")
    for step in range(6):
        time.sleep(0.15)
        sys.stdout.write(f"\\rtrain {step + 1}/6 | loss {5 - step * 0.1:.2f}")
        sys.stdout.flush()
    sys.stdout.write("\\n")
    """
)


def test_a_progress_bars_rewrites_arrive_one_by_one_as_they_are_written(tmp_path):
    channel = MetricsChannel.for_stdout(tmp_path, r"loss ([0-9.]+)")
    result = run_isolated(
        Launchers(commands=[[sys.executable, "-c", BAR]], envs=[{}], cwd=tmp_path),
        trial_id="lines-test",
        timeout_s=60,
        logs=(tmp_path / "stdout.log", tmp_path / "stderr.log"),
        channel=channel,
    )
    assert result.returncode == 0
    arrivals = channel.steps_s["stdout"]
    assert len(arrivals) == 6, arrivals  # one per rewrite, not one for the whole bar
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert statistics.median(gaps) > 0.1, gaps  # each read when written, 0.15 s apart
    # the log keeps the bytes as written
    assert (tmp_path / "stdout.log").read_bytes().count(b"\r") == 6
