"""The instruction reader: English and Chinese, strict units, nothing dropped silently."""

import pytest

from infrarsi.init.parse import clauses, read_instruction

from conftest import INSTRUCTION_EN as EN
from conftest import INSTRUCTION_ZH as ZH

FILES = ["data.py", "model.py", "train.py", "workload.yaml"]


@pytest.mark.parametrize("text", [EN, ZH])
def test_the_must_show_instruction(text):
    r = read_instruction(text, FILES)
    assert r.objective == "e2e_time"
    assert r.loss_tolerance == pytest.approx(0.005)
    assert r.mem_cap_bytes == 2 * 2**30
    assert r.lock == ["data.py"]
    assert r.budget_trials == 20
    assert r.not_understood == []


@pytest.mark.parametrize("text, field, value", [
    ("maximise throughput", "objective", "tokens_per_s"),
    ("提高吞吐", "objective", "tokens_per_s"),
    ("stay under 16 GiB of memory", "mem_cap_bytes", 16 * 2**30),
    ("显存不超过 40GB", "mem_cap_bytes", 40 * 10**9),
    ("loss drift below 0.01", "loss_tolerance", 0.01),
    ("loss 偏差不超过 1%", "loss_tolerance", 0.01),
    ("two hours", "budget_wall_time_s", 7200.0),
    ("两小时", "budget_wall_time_s", 7200.0),
    ("30 minutes", "budget_wall_time_s", 1800.0),
    ("thirty trials", "budget_trials", 30),
    ("二十次试验", "budget_trials", 20),
])
def test_single_facts(text, field, value):
    assert getattr(read_instruction(text, FILES), field) == value


def test_locks_named_files_and_the_model():
    r = read_instruction("don't touch train.py or the model", FILES)
    assert set(r.lock) == {"train.py", "model.py"}


def test_unparsed_clauses_are_listed_not_dropped():
    r = read_instruction("Cut time; use the blue nodes first; memory below 16G", FILES)
    assert r.objective == "e2e_time"
    assert r.not_understood == ["use the blue nodes first", "memory below 16G"]
    assert r.mem_cap_bytes is None  # "16G" is ambiguous (GB or GiB?) and is not guessed


def test_clauses_keep_decimals_whole():
    assert clauses("within 0.5% and 2.5 GiB. Done") == ["within 0.5%", "2.5 GiB", "Done"]
