"""How a workload that is not instrumented reports its steps: the regexes that read its per-step
metrics (step time, loss, tokens) from rank 0's output, as its manifest states them
(``launch.metrics``)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StdoutPattern(_Strict):
    """A regex with exactly one capture group, and the unit of the number it captures."""

    pattern: str
    unit: Literal["s", "ms", "us"] = "s"

    @field_validator("pattern")
    @classmethod
    def _one_group(cls, pattern: str) -> str:
        try:
            groups = re.compile(pattern).groups
        except re.error as exc:
            raise ValueError(f"{pattern!r} is not a valid regex: {exc}") from None
        if groups != 1:
            raise ValueError(
                f"{pattern!r} has {groups} capture groups; give exactly one, "
                "around the number, e.g. 'loss ([0-9.]+)'"
            )
        return pattern

    def scale_to_base(self) -> float:
        """Factor from the captured number to the base unit (seconds for times)."""
        return {"s": 1.0, "ms": 1e-3, "us": 1e-6}[self.unit]


class StdoutMetrics(_Strict):
    """Regexes that read per-step metrics from rank 0's stdout, for scripts not instrumented.

    A bare string is a pattern whose number is in seconds (``step_time_s: "time ([0-9.]+)"``);
    ``step_time: {pattern: "time ([0-9.]+)ms", unit: ms}`` states another unit. A script that
    prints no step time leaves ``step_time`` out: its loss lines are the step lines, and each
    step is timed by the harness's clock between their arrivals (the first, whose start no line
    marks, as long as the median of the others). ``tokens_per_step`` (optional) lets the
    harness check the workload invariant. ``read_stderr``: the lines are read from standard
    error too, as they arrive (a script that logs with Python's ``logging``, which writes there).
    """

    step_time: StdoutPattern | None = None
    loss: StdoutPattern
    tokens_per_step: StdoutPattern | None = None
    read_stderr: bool = False
    steps_offset: int = Field(
        0,
        ge=0,
        le=1,
        description="step lines a run prints beyond the steps it is given: 1 for a loop over "
        "range(max_iters + 1), as nanoGPT's; each is an optimizer step",
    )

    @property
    def step_line(self) -> str:
        """The pattern that marks one step's line: the step time's, else the loss's."""
        return (self.step_time or self.loss).pattern

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "step_time_s" in data:
            if "step_time" in data:
                raise ValueError("give either step_time_s (seconds) or step_time, not both")
            data["step_time"] = data.pop("step_time_s")
        for key in ("step_time", "loss", "tokens_per_step"):
            if isinstance(data.get(key), str):
                data[key] = {"pattern": data[key]}
        return data


class ObservedMetrics(_Strict):
    """Steps read from the training itself, for scripts whose prints cannot be relied on: each
    rank's optimizer steps, the loss that reached ``backward`` in each, and the backward calls
    a step ran, reported by the harness's observer on the harness's channel
    (``sandbox/_hooks/infrarsi_observe.py``); timed by the harness's clock as they arrive.
    Written ``metrics: observed`` (or ``{observed: optimizer, steps_offset: 1}`` for a loop
    that takes one optimizer step more than it is given, as nanoGPT's does)."""

    observed: Literal["optimizer"] = "optimizer"
    steps_offset: int = Field(
        0,
        ge=0,
        le=1,
        description="optimizer steps a run takes beyond the steps it is given: 1 for a loop "
        "over range(max_iters + 1)",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"observed": "optimizer"} if data == "observed" else data
