"""A deterministic reader of optimisation instructions, in English, Chinese and Japanese.

The instruction is cut into clauses; each clause is read by a few rules (objective, memory limit,
loss tolerance, files not to touch, budget). A clause no rule understands is returned as not
understood, never dropped. Units are parsed strictly: "16 GiB" and "40GB" are sizes, "16G" is
refused as ambiguous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from infrarsi.init.numbers import ZH_NUMERAL, parse_number
from infrarsi.units import format_bytes, parse_bytes

# Clauses end at punctuation and conjunctions, but not inside a number: "1,000" keeps its comma
# and "a hundred and twenty" its "and".
_CLAUSE_SPLIT = re.compile(
    r"[;；。，、\n]|(?<!\d),|,(?!\d{3}(?!\d))|\.(?=\s|$)|"
    r"(?<!hundred )(?<!thousand )\band\b|\bbut\b|并且|同时|而且|かつ|そして|ただし"
)
_THROUGHPUT = re.compile(
    r"throughput|tokens?\s*(/|per)\s*s(ec(ond)?)?\b|tok/s|吞吐|スループット|トークン/秒"
)
_TIME = re.compile(
    r"\btime\b|faster|speed\s*up|accelerate|wall|e2e|end-to-end|time-to-train|"
    r"时间|加速|提速|更快|"
    r"時間|高速化|速く|短縮|エンドツーエンド"
)
_E2E = re.compile(r"\bwall|e2e|end-to-end|time-to-train|エンドツーエンド")
_TARGET = re.compile(r"(\d+(?:\.\d+)?)\s*(?:x|×|times|倍)(?![a-z])")
_MEMORY = re.compile(r"memory|\bmem\b|vram|\bram\b|显存|内存|メモリ")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)?", re.IGNORECASE)
_LOSS = re.compile(r"loss|损失|損失|ロス")
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*(%|％|percent|个百分点|パーセント)")
_FRACTION = re.compile(r"(?<![\d.])(0\.\d+)(?![\d%％])")
_NEGATION = re.compile(
    r"don'?t|do not|never|without|must not|leave|不要|别|勿|禁止|不得|不能|"
    r"ないで|ない|せず|しない|不可"
)
_TOUCH = re.compile(r"touch|change|modify|edit|alone|修改|改动|改|动|触|変更|編集|いじ|手を入れ")
_NUMBER = r"(\d[\d,]*(?:\.\d+)?|(?:[a-z]+[\s-]+)*[a-z]+|[{ZH}]+|半)"
_TRIALS = re.compile(
    _NUMBER.replace("{ZH}", ZH_NUMERAL)
    + r"\s*(?:trials?|runs?|experiments?|次试验|次实验|个试验|次|回の試行|回|試行)"
)
_DURATION = re.compile(
    _NUMBER.replace("{ZH}", ZH_NUMERAL) + r"\s*(?:个)?\s*"
    r"(hours?|hrs?|h\b|minutes?|mins?|小时|钟头|分钟|時間|分間|分(?!の))"
)
_DATA_WORDS = re.compile(r"data\s*(pipeline|loader|loading|set)?|dataloader|数据|データ")
_MODEL_WORDS = re.compile(r"\bmodel\b|模型|モデル")


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
    problems: list[str] = field(default_factory=list)  # understood, but out of range
    explicit_throughput: bool = False  # an objective named outright (not a bare "faster")
    explicit_e2e: bool = False
    target_speedup: float | None = None  # "100x faster": a target, said against the bound


def clauses(instruction: str) -> list[str]:
    """The instruction cut into clauses, blanks removed."""
    return [c.strip() for c in _CLAUSE_SPLIT.split(instruction) if c and c.strip()]


def read_instruction(instruction: str, files: list[str]) -> Reading:
    """Read every clause; ``files`` are the workload's files, for "don't touch X" clauses."""
    reading = Reading()
    for clause in clauses(instruction):
        known = len(reading.problems)
        meanings = _read_clause(clause, files, reading)
        reading.problems[known:] = [
            p.replace(repr(clause.lower()), repr(clause), 1) for p in reading.problems[known:]
        ]
        if meanings:
            reading.understood.append((clause, "; ".join(meanings)))
        else:
            reading.not_understood.append(clause)
    return reading


def _read_clause(clause: str, files: list[str], reading: Reading) -> list[str]:
    text = clause.lower()
    rules = (_read_lock, _read_memory, _read_loss, _read_budget, _read_target, _read_objective)
    meanings = []
    for rule in rules:
        meaning = rule(text, files, reading)
        if meaning:
            meanings.append(meaning)
            if rule is _read_lock:
                break  # "don't touch the data loader" says nothing else
    return meanings


def _read_objective(text: str, files: list[str], reading: Reading) -> str | None:
    """Throughput, or end-to-end time. A generic "faster" goes with either; an explicit
    end-to-end time beside an explicit throughput is two objectives, refused."""
    if _THROUGHPUT.search(text):
        if reading.explicit_e2e:
            return _two_objectives(reading, text)
        reading.objective, reading.explicit_throughput = "tokens_per_s", True
        return "objective: tokens per second"
    if _TIME.search(text) and not _DURATION.search(text):
        if _E2E.search(text):
            if reading.explicit_throughput:
                return _two_objectives(reading, text)
            reading.objective, reading.explicit_e2e = "e2e_time", True
        reading.objective = reading.objective or "e2e_time"
        return (
            "objective: end-to-end time"
            if reading.objective == "e2e_time"
            else ("faster (with the throughput objective)")
        )
    return None


def _read_target(text: str, files: list[str], reading: Reading) -> str | None:
    """ "100x faster", "2 times the throughput": a target, kept to be answered against what the
    Doctor measures the baseline can give, not a setting of the search."""
    found = _TARGET.search(text)
    if not found or not (_TIME.search(text) or _THROUGHPUT.search(text)):
        return None
    target = float(found.group(1))
    if target <= 1:
        reading.problems.append(f"{text!r}: a target speed-up is above 1x (read {target:g}x)")
        return "target (out of range)"
    reading.target_speedup = target
    return (
        f"target {target:g}x (not a setting of the search, which ends on its budget; the "
        "Doctor's headroom line says what the baseline leaves to gain)"
    )


def _two_objectives(reading: Reading, text: str) -> str:
    reading.problems.append(
        f"{text!r} asks for another objective than an earlier clause (tokens per second and "
        "end-to-end time): give one objective"
    )
    return "objective (disagrees)"


def _disagrees(reading: Reading, name: str, value: float, text: str, what: str) -> bool:
    """Whether an earlier clause set ``name`` to another value: a problem naming both (an
    instruction is understood whole or refused, never resolved towards either silently)."""
    before = getattr(reading, name)
    if before is None or before == value:
        return False
    show = format_bytes if name == "mem_cap_bytes" else (lambda v: f"{v:g}")
    reading.problems.append(
        f"{text!r} gives another value than an earlier clause ({what} {show(before)} and "
        f"{show(value)}): keep the one you mean"
    )
    return True


def _read_memory(text: str, files: list[str], reading: Reading) -> str | None:
    """A size with a unit ("2 GiB", "40GB") is a per-rank memory capacity."""
    for number, unit in _SIZE.findall(text):
        if not unit:
            continue
        try:
            size = parse_bytes(f"{number}{unit}")
        except ValueError:
            continue
        if size <= 0:
            reading.problems.append(f"{text!r}: a memory capacity must be more than 0 bytes")
            return "memory capacity (out of range)"
        if _disagrees(reading, "mem_cap_bytes", size, text, "memory capacities per rank"):
            return "memory capacity (disagrees)"
        reading.mem_cap_bytes = size
        return f"memory capacity {reading.mem_cap_bytes} bytes per rank"
    return None


def _read_loss(text: str, files: list[str], reading: Reading) -> str | None:
    if not _LOSS.search(text):
        return None
    percent = _PERCENT.search(text)
    if percent:
        tolerance = float(percent.group(1)) / 100
    elif fraction := _FRACTION.search(text):
        tolerance = float(fraction.group(1))
    else:
        return None
    if not 0 < tolerance < 1:
        reading.problems.append(
            f"{text!r}: a loss tolerance must be above 0% and below 100% (read {tolerance:.0%})"
        )
        return "loss tolerance (out of range)"
    if _disagrees(reading, "loss_tolerance", tolerance, text, "loss tolerances"):
        return "loss tolerance (disagrees)"
    reading.loss_tolerance = tolerance
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
    count = _number(trials.group(1)) if trials else None
    if count is not None:
        if count < 1 or not float(count).is_integer():
            reading.problems.append(
                f"{text!r}: a trial budget is a whole number of at least 1 (read {count:g})"
            )
            return "budget (out of range)"
        if _disagrees(reading, "budget_trials", int(count), text, "trial budgets"):
            return "budget (disagrees)"
        reading.budget_trials = int(count)
        return f"budget {reading.budget_trials} trials"
    duration = _DURATION.search(text)
    amount = _number(duration.group(1)) if duration else None
    if duration is not None and amount is not None:
        unit = duration.group(2)
        if amount <= 0:
            reading.problems.append(
                f"{text!r}: a time budget must be more than 0 (read {amount:g} {unit})"
            )
            return "budget (out of range)"
        per = 60.0 if unit.startswith(("min", "分")) else 3600.0
        if _disagrees(reading, "budget_wall_time_s", amount * per, text, "time budgets"):
            return "budget (disagrees)"
        reading.budget_wall_time_s = amount * per
        return f"budget {reading.budget_wall_time_s:g} s of wall time"
    return None


def _number(words: str) -> float | None:
    """The longest tail of ``words`` that is a whole number ("run twenty-five" -> 25)."""
    parts = words.split()
    if words == "半" or parts[-2:] in (["half", "an"], ["half", "a"]) or parts[-1:] == ["half"]:
        return 0.5
    for start in range(len(parts)):
        value = parse_number(" ".join(parts[start:]))
        if value is not None:
            return value
    return None
