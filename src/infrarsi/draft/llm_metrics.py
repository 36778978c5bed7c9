"""Optional: an LLM drafts the log patterns the rules cannot read (an unusual step line), from
the dry run's lines. Its patterns are checked exactly as a manifest's are (one capture group,
numbers captured) and as the rules' are (one match per step, a time near the clock in its
unit, steps long enough to time by arrival); an unusable draft leaves the rules' error, with
the reason the LLM's was not used."""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from infrarsi import llm
from infrarsi.draft.metrics import (
    UNITS,
    MetricsDraftError,
    line_gaps_s,
    timeable_by_arrival,
    tokens_pattern,
)
from infrarsi.workloads.stdout import StdoutMetrics

SYSTEM_PROMPT = """You read the output of a few optimizer steps of a PyTorch training script.
Give the Python regular expressions that find, on the lines printed once per optimizer step,
the training loss and (when the lines carry one) the step time. Answer with JSON only:
  "loss": a regex with exactly one capture group around the loss number,
  "step_time": null, or {"pattern": a regex with exactly one capture group around the time,
                         "unit": "s" or "ms" or "us"}.
Each pattern must match exactly once per optimizer step and nowhere else."""
SHOWN_LINES = 80  # of the dry run's output, the lines the LLM is shown
CLOCK_FACTOR = 10.0  # a printed time further than this from the clock is in another unit


class StepTime(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pattern: str
    unit: Literal["s", "ms", "us"]


class LLMPatterns(BaseModel):
    """The LLM's answer, before it is checked against the lines."""

    model_config = ConfigDict(extra="forbid")
    loss: str
    step_time: StepTime | None = None


def ask_patterns(
    lines: list[tuple[float, str]], steps: int, ask: Callable[[str, str], str] = llm.complete
) -> LLMPatterns:
    """The LLM's patterns for ``lines`` (arrival s, text) of ``steps`` steps, each one capture
    group as a manifest needs; MetricsDraftError saying why there are none."""
    shown = "\n".join(text for _, text in lines[:SHOWN_LINES])
    try:
        answer = LLMPatterns.model_validate(
            json.loads(llm.json_object(ask(SYSTEM_PROMPT, f"{steps} steps ran:\n{shown}")))
        )
        StdoutMetrics.model_validate(_metrics_of(answer))
    except Exception as exc:  # any failure of the optional path: the rules' error stands
        raise MetricsDraftError(f"the LLM's patterns were not used ({llm.short(exc)})") from None
    return answer


def check_patterns(
    answer: LLMPatterns, lines: list[tuple[float, str]], steps: int
) -> tuple[dict, list[str]]:
    """``launch.metrics`` from the LLM's patterns once they read ``lines`` as the rules'
    would (once per step, numbers, a time near the clock or steps long enough to time by
    arrival), and notes; MetricsDraftError saying what they got wrong."""
    text = "\n".join(t for _, t in lines)
    for name, pattern in (("loss", answer.loss), ("step time", _time_pattern(answer))):
        if pattern is not None:
            _once_per_step(name, pattern, text, steps)
    if answer.step_time is None:
        timeable_by_arrival(lines, answer.loss)
    else:
        _near_the_clock(lines, answer.loss, answer.step_time)
    metrics = _metrics_of(answer)
    tokens = tokens_pattern(text, steps)
    if tokens is not None:
        metrics["tokens_per_step"] = tokens
    return metrics, ["the log patterns were drafted by the LLM and checked on the dry run"]


def _metrics_of(answer: LLMPatterns) -> dict:
    metrics: dict = {"loss": answer.loss}
    if answer.step_time is not None:
        metrics["step_time"] = answer.step_time.model_dump()
    return metrics


def _time_pattern(answer: LLMPatterns) -> str | None:
    return answer.step_time.pattern if answer.step_time else None


def _once_per_step(name: str, pattern: str, text: str, steps: int) -> None:
    found = re.findall(pattern, text)
    if len(found) != steps:
        raise MetricsDraftError(
            f"the LLM's {name} pattern {pattern!r} matched {len(found)} times in {steps} steps"
        )
    try:
        [float(str(v).replace(",", "")) for v in found]
    except ValueError:
        raise MetricsDraftError(
            f"the LLM's {name} pattern {pattern!r} captured {found[0]!r}, not a number"
        ) from None


def _near_the_clock(lines, loss: str, step_time: StepTime) -> None:
    """MetricsDraftError when the printed times, in the LLM's unit, are further than
    ``CLOCK_FACTOR`` from the seconds between the loss lines by the harness's clock."""
    gaps = [g for g in line_gaps_s(lines, loss) if g > 0]
    text = "\n".join(x for _, x in lines)
    values = [float(v.replace(",", "")) for v in re.findall(step_time.pattern, text)]
    if not gaps or not values or statistics.median(values) <= 0:
        return
    seconds = statistics.median(values) * UNITS[step_time.unit]
    if abs(math.log(seconds / statistics.median(gaps))) > math.log(CLOCK_FACTOR):
        raise MetricsDraftError(
            f"the LLM read the step time in {step_time.unit}: {seconds:.4g} s a step, but the "
            f"lines came {statistics.median(gaps):.4g} s apart"
        )
