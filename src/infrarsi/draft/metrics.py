"""The stdout patterns of a manifest, read from a dry run's lines: which line repeats once per
step, where its loss and its time are, and the time's unit — checked against the harness's own
clock between those lines. Every pattern must find exactly one match per step, as the harness
reads them (``trial.metrics.read_stdout``)."""

from __future__ import annotations

import math
import re
import statistics

from infrarsi.errors import InfraRSIError
from infrarsi.trial.metrics import ARRIVAL_FLOOR_S

NUMBER = r"([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
POSITIVE = r"(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
LOSS_PATTERNS = (
    r"'loss': '?" + NUMBER,  # Hugging Face's log dicts (recent versions quote the number)
    r'"loss": "?' + NUMBER,
    r"(?<![\w.])loss[ :=]+" + NUMBER,
    r"(?<![\w.])train[_ ]loss[ :=]+" + NUMBER,
)
TIME_PATTERNS: tuple[tuple[str, str | None], ...] = (  # (pattern, unit; None: by the clock)
    (r"time[ :=]+" + POSITIVE + r" ?ms", "ms"),
    (r"dt[ :=]+" + POSITIVE + r" ?ms", "ms"),
    (r"time[ :=]+" + POSITIVE + r" ?us", "us"),
    (r"time[ :=]+" + POSITIVE + r" ?s\b", "s"),
    (r"(?<![\w.])" + POSITIVE + r" ?ms/(?:step|it(?:er)?)", "ms"),
    (r"(?<![\w.])" + POSITIVE + r" ?s/(?:step|it(?:er)?)", "s"),
    (r"(?:step_)?time[ :=]+" + POSITIVE, None),
    (r"\|\s*" + POSITIVE + r" ?ms\b", "ms"),  # a bare time between bars: "| 32.3 ms"
    (r"(?<![\w.])" + POSITIVE + r" ?ms\b(?!/)", "ms"),  # a bare time anywhere on the line
)
# the lines a loop prints per run beyond its step argument: none, or one (a loop over
# ``range(max_iters + 1)``, as nanoGPT's is)
OFFSETS = (0, 1)
_NUMBER_IN_TEXT = re.compile(r"[-+]?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")
_LEAD_WORDS = 4  # at most this many words before the loss tell its line from the others'

TOKENS_PATTERNS = (  # nanoGPT prints "tokens per iteration will be: 491,520"
    r"tokens per (?:iter(?:ation)?|step)(?: will be)?[ :=]+(\d[\d,]*)",
    r"tokens_per_step[ :=]+(\d[\d,]*)",
)
UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
# a parameter count as scripts print it: nanoGPT's "number of parameters: 10.65M", "Number of
# trainable parameters = 124,439,808", "params: 1.2M", "num_params=85000"
PARAMS_PATTERN = (
    r"(?i)(?:number of (?:trainable )?parameters|num[_ ]?params|n_params|(?<![\w.])params"
    r"|(?<![\w.])parameters)\s*[:=]\s*(\d[\d,]*(?:\.\d+)?)\s*([KMBG])?\b"
)
SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9}


class MetricsDraftError(InfraRSIError):
    """The dry run printed no line the harness could read a step from; the message says what
    it saw and what a script must print."""


def read_metrics(lines: list[tuple[float, str]], steps: int) -> tuple[dict, list[str]]:
    """The manifest's ``launch.metrics`` from a dry run's stdout lines (arrival time in
    seconds, text) that ran ``steps`` steps, and notes for the user. The step lines are the
    ones that print a loss once per step — as many as the steps, or one more (a loop over
    ``range(max_iters + 1)``); an evaluation's ``train loss``/``val loss`` lines beside them
    are told apart by the words before their loss."""
    text = "\n".join(line for _, line in lines)
    found = _step_lines(lines, text, steps)
    if found is None:
        raise MetricsDraftError(
            f"no line gave a loss once per step in {steps} steps (saw {len(lines)} lines, e.g. "
            f"{_sample(lines)}); print one line per optimizer step with its loss, e.g. "
            "'step 3: loss 2.31, time 41.2ms'"
        )
    loss, offset = found
    notes = []
    metrics: dict = {"loss": loss}
    if offset:
        metrics["steps_offset"] = offset
        notes.append(
            f"the loop prints {steps + offset} step lines for {steps} steps asked (it runs "
            "its last step too): each run is read as that many optimizer steps"
        )
    steps += offset
    time = _step_time(lines, text, loss, steps)
    if time is None:
        timeable_by_arrival(lines, loss)
        notes.append(
            "the script prints no step time: each step is timed by the harness's clock "
            "between its loss lines"
        )
    else:
        pattern, unit, note = time
        metrics["step_time"] = {"pattern": pattern, "unit": unit}
        if note:
            notes.append(note)
    tokens = tokens_pattern(text, steps)
    if tokens is not None:
        metrics["tokens_per_step"] = tokens
    else:
        notes.append("no tokens-per-step line: the harness will not check that invariant")
    return metrics, notes


def tokens_pattern(text: str, steps: int) -> str | None:
    """The pattern of a tokens-per-step line printed once or once per step, else None."""
    return next(
        ("(?i)" + p for p in TOKENS_PATTERNS if len(re.findall(p, text, re.I)) in (1, steps)),
        None,
    )


def _step_lines(lines: list[tuple[float, str]], text: str, steps: int) -> tuple[str, int] | None:
    """(the loss pattern of the step lines, how many lines beyond ``steps`` a run prints):
    a loss pattern that matches once per step (or once more) in ``text`` (the lines joined),
    else one narrowed by the words before the loss on the lines that repeat so (``_led``);
    None when no line does."""
    for offset in OFFSETS:
        for pattern in LOSS_PATTERNS:
            if len(re.findall(pattern, text, re.I)) == steps + offset:
                return "(?i)" + pattern, offset
    for offset in OFFSETS:
        led = _led(lines, text, steps + offset)
        if led is not None:
            return led, offset
    return None


def _led(lines: list[tuple[float, str]], text: str, count: int) -> str | None:
    """A loss pattern led by the words that come before the loss on one kind of line, which
    ``count`` lines print (``iter 3: loss 2.31`` beside ``step 0: train loss 2.40, val loss
    2.41``): the fewest words before the loss that make the pattern match ``count`` times."""
    kinds: dict[str, list[str]] = {}
    for _, line in lines:
        for pattern in LOSS_PATTERNS:
            match = re.search(pattern, line, re.I)
            if match:
                kinds.setdefault(pattern, []).append(line[: match.start()])
                break
    for pattern, leads in kinds.items():
        for lead in dict.fromkeys(_template(x) for x in leads):
            words = lead.split()
            for n in range(1, min(_LEAD_WORDS, len(words)) + 1):
                led = _as_regex(" ".join(words[-n:])) + r"\s*" + pattern
                if len(re.findall(led, text, re.I)) == count:
                    return "(?i)" + led
    return None


def _template(text: str) -> str:
    """``text`` with every number as ``#``: the lines of one kind print one template."""
    return _NUMBER_IN_TEXT.sub("#", text)


def _as_regex(template: str) -> str:
    """A template's regex: its text as written, each ``#`` any number, spaces any spaces."""
    parts = [re.escape(part) for part in template.split("#")]
    return _NUMBER_IN_TEXT.pattern.join(parts).replace(r"\ ", r"\s+")


def _step_time(lines, text: str, loss: str, steps: int) -> tuple[str, str, str | None] | None:
    """(pattern, unit, note) of the step time on the loss lines; a unit not printed is the one
    that puts the printed times nearest the clock between the loss lines. A time pattern that
    also matches other lines is narrowed to the step lines (led by the loss pattern)."""
    step_text = "\n".join(line for _, line in lines if re.search(loss, line))
    for pattern, unit in TIME_PATTERNS:
        if len(re.findall(pattern, step_text, re.I)) != steps:
            continue
        if len(re.findall(pattern, text, re.I)) != steps:
            pattern = _uncaptured(loss.removeprefix("(?i)")) + r"[^\n]*?" + pattern
            if len(re.findall(pattern, text, re.I)) != steps:
                continue
        if unit is not None:
            return "(?i)" + pattern, unit, None
        return "(?i)" + pattern, *_unit_by_clock(lines, loss, pattern)
    return None


def _uncaptured(pattern: str) -> str:
    """``pattern`` with its groups made non-capturing: it leads another pattern, whose one
    group is the number read."""
    return re.sub(r"(?<!\\)\((?!\?)", "(?:", pattern)


def line_gaps_s(lines: list[tuple[float, str]], pattern: str) -> list[float]:
    """The seconds between consecutive arrivals of the lines ``pattern`` matches (the rules'
    patterns carry their own ``(?i)``)."""
    arrivals = [t for t, line in lines if re.search(pattern, line)]
    return [b - a for a, b in zip(arrivals, arrivals[1:])]


def timeable_by_arrival(lines, loss: str) -> None:
    """MetricsDraftError when the loss lines came too close together to time the steps by."""
    gaps = line_gaps_s(lines, loss)
    if gaps and statistics.median(gaps) < ARRIVAL_FLOOR_S:
        raise MetricsDraftError(
            f"the loss lines ({loss!r}) carry no step time and came a median "
            f"{statistics.median(gaps) * 1e3:.1f} ms apart, too close to time the steps by "
            "their arrival; print each step's time on its line, e.g. 'time 41.2ms'"
        )


def _unit_by_clock(lines, loss: str, pattern: str) -> tuple[str, str]:
    """The unit for times printed without one: of s, ms and us, the one whose values are
    nearest (in log) the seconds between consecutive loss lines by the harness's clock."""
    gaps = [g for g in line_gaps_s(lines, loss) if g > 0]
    values = [float(v) for v in re.findall(pattern, "\n".join(x for _, x in lines), re.I)]
    if not gaps or not values or statistics.median(values) <= 0:
        return "s", "the step time's unit was not printed and could not be checked: seconds"
    gap, value = statistics.median(gaps), statistics.median(values)
    unit = min(UNITS, key=lambda u: abs(math.log(value * UNITS[u] / gap)))
    return unit, (
        f"the step time's unit was not printed: {unit}, from the clock (a median {value:g} "
        f"printed, {gap:.3f} s between lines)"
    )


def _sample(lines: list[tuple[float, str]]) -> str:
    shown = [line for _, line in lines if line.strip()][:3]
    return "; ".join(repr(s[:80]) for s in shown) or "nothing"


def read_flops(lines: list[tuple[float, str]]) -> tuple[dict | None, str]:
    """The manifest's ``flops`` from the parameter count the dry run printed (6N per token:
    forward and backward of N parameters, attention's sequence term left out), else None; and
    a note for the user either way."""
    for _, line in lines:
        match = re.search(PARAMS_PATTERN, line)
        if match:
            count = float(match.group(1).replace(",", "")) * SUFFIX[(match.group(2) or "").upper()]
            if count >= 1:
                n = f"{count:.6g}"
                return (
                    {
                        "per_token": f"6 * {n}",
                        "formula": f"6N with N = {n} parameters as the script printed them "
                        f"({line.strip()[:60]!r}); attention's sequence term left out",
                    },
                    f"FLOPs per token: 6 x {n} parameters, from the printed count: check it",
                )
    return None, (
        "FLOPs: the dry run printed no parameter count, so MFU will read 'not available' "
        "(add flops.per_token to the manifest to have it)"
    )
