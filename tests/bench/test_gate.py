"""The stationarity gate of a measured table (``bench/gate.py``): a block of rows whose
baseline anchors moved past the host's noise is measured again; a steady host's is not."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import gate  # noqa: E402


class Host:
    """A host whose speed follows ``speed(n)`` at its n-th trial (a log offset), each trial's
    time the cell's own times that speed, with no other noise."""

    def __init__(self, speed):
        self.speed, self.n, self.rows, self.dropped = speed, 0, [], []

    def run_row(self, c, r):
        self.n += 1
        self.rows.append((c, r, self.n))
        return f"t{self.n}", math.log(1.0 + c) + self.speed(self.n)

    def run_anchor(self):
        self.n += 1
        return self.speed(self.n)

    def drop(self, ids):
        self.dropped.append(ids)


def _gated(host, rows=24):
    todo = [(c, 0) for c in range(rows)]
    return gate.gated(todo, host.run_row, host.run_anchor, host.drop)


def test_a_steady_host_measures_every_row_once():
    host = Host(lambda n: 0.01 * (-1) ** n)  # 2% wobble: under the gate's tenth
    drift = _gated(host)
    assert len(host.rows) == 24 and not host.dropped and drift.remeasured == 0
    assert drift.as_json()["anchors"] == 3 + 3  # three first, one after each block of 8


def test_a_block_measured_across_a_step_in_the_hosts_speed_is_measured_again():
    host = Host(lambda n: 0.0 if n < 16 else math.log(1 / 1.5))  # 1.5x faster mid-block 2
    drift = _gated(host)
    assert len(host.dropped) == 1 and len(host.dropped[0]) == 8  # the block that saw it
    assert drift.remeasured == 1 and drift.kept_drifted == 0
    assert len(host.rows) == 24 + 8
    assert drift.largest_step_log == pytest.approx(math.log(1.5))


def test_a_host_that_keeps_moving_is_measured_again_at_most_so_often_then_said():
    host = Host(lambda n: 0.2 * n)  # faster and faster: every block drifts
    drift = _gated(host, rows=8)
    assert drift.remeasured == gate.MAX_REMEASURES and drift.kept_drifted == 1


def test_the_gate_widens_with_the_first_anchors_noise_and_never_under_a_tenth():
    assert gate.threshold([0.0, 0.0, 0.0]) == gate.GATE_MIN_LOG
    wide = gate.threshold([0.0, 0.04, -0.04])
    assert wide == pytest.approx(gate.GATE_Z * math.sqrt(2) * 0.04)
    assert gate.threshold([0.0, 0.5, -0.5]) == gate.GATE_MAX_LOG  # a loaded host: capped
    assert gate.drifted(None, 0.0, wide)  # an anchor that did not run: the host unread
