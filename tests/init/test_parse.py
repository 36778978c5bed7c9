"""The instruction reader: English, Chinese and Japanese, strict units, nothing dropped
silently."""

import pytest
from conftest import INSTRUCTION_EN as EN
from conftest import INSTRUCTION_JA as JA
from conftest import INSTRUCTION_ZH as ZH

from infrarsi.init.parse import clauses, read_instruction

FILES = ["data.py", "model.py", "train.py", "workload.yaml"]


@pytest.mark.parametrize("text", [EN, ZH, JA])
def test_the_must_show_instruction(text):
    r = read_instruction(text, FILES)
    assert r.objective == "e2e_time"
    assert r.loss_tolerance == pytest.approx(0.005)
    assert r.mem_cap_bytes == 2 * 2**30
    assert r.lock == ["data.py"]
    assert r.budget_trials == 20
    assert r.not_understood == []


@pytest.mark.parametrize(
    "text, field, value",
    [
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
        ("スループットを最大化", "objective", "tokens_per_s"),
        ("学習を高速化", "objective", "e2e_time"),
        ("損失は1%以内に保つ", "loss_tolerance", 0.01),
        ("ロスの差は0.5％まで", "loss_tolerance", 0.005),
        ("メモリは16GiB以内", "mem_cap_bytes", 16 * 2**30),
        ("2時間以内", "budget_wall_time_s", 7200.0),
        ("30分で", "budget_wall_time_s", 1800.0),
        ("試行は二十回", "budget_trials", 20),
    ],
)
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


@pytest.mark.parametrize(
    "text, trials",
    [
        ("twenty-five trials", 25),
        ("twenty five trials", 25),
        ("1,000 trials", 1000),
        ("a hundred and twenty trials", 120),
        ("run one thousand two hundred trials", 1200),
        ("一百次试验", 100),
        ("二十五次试验", 25),
        ("两千零五次试验", 2005),
        ("12 runs", 12),
    ],
)
def test_numbers_in_words_and_with_separators(text, trials):
    r = read_instruction(text, FILES)
    assert r.budget_trials == trials and r.not_understood == [] and r.problems == []


@pytest.mark.parametrize(
    "text, seconds",
    [("half an hour", 1800), ("two hours", 7200), ("1.5 hours", 5400), ("半小时", 1800)],
)
def test_durations(text, seconds):
    assert read_instruction(text, FILES).budget_wall_time_s == seconds


@pytest.mark.parametrize("text", ["run a few trials", "lots of trials", "一二次试验"])
def test_numbers_that_are_not_numbers_are_not_understood(text):
    r = read_instruction(text, FILES)
    assert r.budget_trials is None and r.not_understood == [text]


def test_a_size_is_a_memory_capacity_even_without_the_word_memory():
    assert read_instruction("at most 2 GiB per rank", FILES).mem_cap_bytes == 2 * 2**30


@pytest.mark.parametrize(
    "text, says",
    [
        ("memory under 0 GiB", "more than 0 bytes"),
        ("loss within 150%", "below 100%"),
        ("0 trials", "at least 1"),
        ("zero trials", "at least 1"),
    ],
)
def test_out_of_range_values_name_the_clause_and_the_range(text, says):
    r = read_instruction(text, FILES)
    assert len(r.problems) == 1 and repr(text) in r.problems[0] and says in r.problems[0]


def test_the_japanese_of_the_write_ups_is_read_whole():
    """The source write-ups' language: "maximise throughput, keep the loss within 1%"."""
    r = read_instruction("スループットを最大化し、損失は1%以内に保つ", FILES)
    assert (r.objective, r.loss_tolerance, r.not_understood) == ("tokens_per_s", 0.01, [])
    locked = read_instruction("モデルは変更しないで", FILES)
    assert locked.lock == ["model.py"]


@pytest.mark.parametrize(
    "text, said",
    [
        ("keep the loss within 1%, keep the loss within 5%", "loss tolerances 0.01 and 0.05"),
        ("stay under 2 GiB, memory below 4 GiB", "memory capacities per rank 2.0 GiB and 4.0 GiB"),
        ("run 10 trials, and 20 trials", "trial budgets 10 and 20"),
        ("maximise throughput, cut end-to-end time", "tokens per second and end-to-end time"),
    ],
)
def test_two_clauses_that_disagree_are_refused_with_both_named(text, said):
    reading = read_instruction(text, [])
    assert any(said in p for p in reading.problems), reading.problems


def test_a_bare_faster_goes_with_throughput_and_a_target_is_kept_said():
    reading = read_instruction("make it faster, maximise throughput", [])
    assert reading.objective == "tokens_per_s" and reading.problems == []
    target = read_instruction("make it 100x faster", [])
    assert target.target_speedup == 100 and target.objective == "e2e_time"
    assert "target 100x" in target.understood[0][1]
    assert read_instruction("run 20 times", []).target_speedup is None  # not a speed


def test_an_instruction_with_nothing_understood_is_refused_with_an_example():
    from infrarsi.init import InitError
    from infrarsi.init.stage import init
    from infrarsi.workloads import find

    with pytest.raises(InitError, match="nothing in the instruction was understood") as refused:
        init(find("dense-1node"), "tiny", "asdf qwer zxcv")
    assert "'asdf qwer zxcv'" in str(refused.value) and "e.g." in str(refused.value)
