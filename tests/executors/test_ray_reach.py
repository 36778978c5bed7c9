"""An unreachable Ray cluster is bad input named at once: the address, the fix, exit 2, before
any trial is spent (Ray's own retries would take about a minute)."""

import socket
import subprocess
import sys
import time

import pytest

from infrarsi.errors import InfraRSIError
from infrarsi.executors.ray_executor import RayUnavailable, check_reachable


def test_an_address_nothing_listens_on_is_refused_with_the_fix():
    with pytest.raises(RayUnavailable, match=r"127\.0\.0\.1:1 .*ray start --head"):
        check_reachable("127.0.0.1:1")
    with pytest.raises(RayUnavailable, match="HOST:PORT"):
        check_reachable("no-port-here")
    assert issubclass(RayUnavailable, InfraRSIError)  # the CLI's exit 2, not a bug's 3


def test_a_listening_address_and_auto_pass():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_reachable(f"127.0.0.1:{server.getsockname()[1]}")
    check_reachable("auto")


def test_the_cli_ends_with_exit_2_within_seconds(tmp_path):
    t0 = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "infrarsi", "trial", "dense-1node", "--scale", "tiny"]
        + ["--executor", "ray", "--ray-address", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "127.0.0.1:1" in result.stderr and time.monotonic() - t0 < 60
    assert not (tmp_path / ".infrarsi" / "trials").exists() or not any(
        (tmp_path / ".infrarsi" / "trials").iterdir()
    )
