"""A deterministic reader of optimisation instructions, in English and Chinese.

The instruction is cut into clauses; each clause is read by a few rules (objective, memory limit,
loss tolerance, files not to touch, budget). A clause no rule understands is returned as not
understood, never dropped. Units are parsed strictly: "16 GiB" and "40GB" are sizes, "16G" is
refused as ambiguous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from infrarsi.units import parse_bytes

_CLAUSE_SPLIT = re.compile(r"[;；。，,、\n]|\.(?=\s|$)|\band\b|\bbut\b|并且|同时|而且")
_THROUGHPUT = re.compile(r"throughput|tokens?\s*(/|per)\s*s(ec(ond)?)?\b|tok/s|吞吐")
_TIME = re.compile(r"\btime\b|faster|speed\s*up|accelerate|wall|e2e|end-to-end|time-to-train|"
                   r"时间|加速|提速|更快")
_MEMORY = re.compile(r"memory|\bmem\b|vram|\bram\b|显存|内存")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)?", re.IGNORECASE)
_LOSS = re.compile(r"loss|损失")
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*(%|percent|个百分点)")
_FRACTION = re.compile(r"(?<![\d.])(0\.\d+)(?![\d%])")
_NEGATION = re.compile(r"don'?t|do not|never|without|must not|leave|不要|别|勿|禁止|不得|不能")
_TOUCH = re.compile(r"touch|change|modify|edit|alone|修改|改动|改|动")
_TRIALS = re.compile(r"(\d+|[a-z]+|[一二两三四五六七八九十百]+)\s*(?:trials?|runs?|experiments?|"
                     r"次试验|次实验|个试验|次)")
_DURATION = re.compile(r"(\d+(?:\.\d+)?|[a-z]+|[一二两三四五六七八九十半]+)\s*(?:个)?\s*"
                       r"(hours?|hrs?|h\b|minutes?|mins?|小时|钟头|分钟)")
_EN_NUMBERS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty".split())}
_EN_NUMBERS.update({"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "hundred": 100,
                    "a": 1, "an": 1, "half": 0.5})
_ZH_DIGITS = {"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
              "九": 9, "半": 0.5}
_DATA_WORDS = re.compile(r"data\s*(pipeline|loader|loading|set)?|dataloader|数据")
_MODEL_WORDS = re.compile(r"\bmodel\b|模型")


@dataclass
class Reading:
    """What the rules understood of an instruction, and the clauses they did not."""
    objective: str | None = None
    loss_tolerance: float | None = None
    mem_cap_bytes: int | None = None
    lock: list[str] = field(default_factory=list)
    budget_trials: int | None = None
    budget_wall_time_s: float | None = None
    understood: list[tuple[str, str]] = field(default_factory=list)
    not_understood: list[str] = field(default_factory=list)


def clauses(instruction: str) -> list[str]:
    """The instruction cut into clauses, blanks removed."""
    return [c.strip() for c in _CLAUSE_SPLIT.split(instruction) if c and c.strip()]


def read_instruction(instruction: str, files: list[str]) -> Reading:
    """Read every clause; ``files`` are the workload's files, for "don't touch X" clauses."""
    reading = Reading()
    for clause in clauses(instruction):
        meanings = _read_clause(clause, files, reading)
        if meanings:
            reading.understood.append((clause, "; ".join(meanings)))
        else:
            reading.not_understood.append(clause)
    return reading


def _read_clause(clause: str, files: list[str], reading: Reading) -> list[str]:
    text = clause.lower()
    rules = (_read_lock, _read_memory, _read_loss, _read_budget, _read_objective)
    meanings = []
    for rule in rules:
        meaning = rule(text, files, reading)
        if meaning:
            meanings.append(meaning)
            if rule is _read_lock:
                break  # "don't touch the data loader" says nothing else
    return meanings


def _read_objective(text: str, files: list[str], reading: Reading) -> str | None:
    if _THROUGHPUT.search(text):
        reading.objective = "tokens_per_s"
        return "objective: tokens per second"
    if _TIME.search(text) and not _DURATION.search(text):
        reading.objective = reading.objective or "e2e_time"
        return "objective: end-to-end time"
    return None


def _read_memory(text: str, files: list[str], reading: Reading) -> str | None:
    if not _MEMORY.search(text):
        return None
    for number, unit in _SIZE.findall(text):
        if not unit:
            continue
        try:
            reading.mem_cap_bytes = parse_bytes(f"{number}{unit}")
        except ValueError:
            continue
        return f"memory capacity {reading.mem_cap_bytes} bytes per rank"
    return None


def _read_loss(text: str, files: list[str], reading: Reading) -> str | None:
    if not _LOSS.search(text):
        return None
    percent = _PERCENT.search(text)
    if percent:
        reading.loss_tolerance = float(percent.group(1)) / 100
    elif _FRACTION.search(text):
        reading.loss_tolerance = float(_FRACTION.search(text).group(1))
    else:
        return None
    return f"loss tolerance {reading.loss_tolerance:g} (relative)"


def _read_lock(text: str, files: list[str], reading: Reading) -> str | None:
    if not (_NEGATION.search(text) and _TOUCH.search(text)):
        return None
    named = [f for f in files if f.lower() in text]
    if _DATA_WORDS.search(text):
        named += [f for f in files if fnmatchcase(f.rsplit("/", 1)[-1], "*data*")]
    if _MODEL_WORDS.search(text):
        named += [f for f in files if fnmatchcase(f.rsplit("/", 1)[-1], "model*")]
    named = list(dict.fromkeys(named))
    if not named:
        return None
    reading.lock += [f for f in named if f not in reading.lock]
    return f"lock {', '.join(named)}"


def _read_budget(text: str, files: list[str], reading: Reading) -> str | None:
    trials = _TRIALS.search(text)
    if trials and _number(trials.group(1)) is not None:
        reading.budget_trials = int(_number(trials.group(1)))
        return f"budget {reading.budget_trials} trials"
    duration = _DURATION.search(text)
    if duration and _number(duration.group(1)) is not None:
        unit = duration.group(2)
        per = 60.0 if unit.startswith(("min", "分")) else 3600.0
        reading.budget_wall_time_s = _number(duration.group(1)) * per
        return f"budget {reading.budget_wall_time_s:g} s of wall time"
    return None


def _number(word: str) -> float | None:
    """'20' -> 20, 'two' -> 2, '两' -> 2, '二十' -> 20; None when it is not a number."""
    if re.fullmatch(r"\d+(\.\d+)?", word):
        return float(word)
    if word in _EN_NUMBERS:
        return float(_EN_NUMBERS[word])
    if word and all(ch in _ZH_DIGITS or ch in "十百" for ch in word):
        return _zh_number(word)
    return None


def _zh_number(word: str) -> float:
    if "十" not in word:
        return float(_ZH_DIGITS[word[0]]) if len(word) == 1 else float("nan")
    tens, _, ones = word.partition("十")
    return float(_ZH_DIGITS.get(tens, 1) * 10 + (_ZH_DIGITS.get(ones, 0) if ones else 0))
