"""The LLM's draft of the log patterns the rules cannot read: asked only when the rules fail,
checked on the dry run's lines as the rules' are, and refused with the reason when wrong (a
real chat-completions server on loopback, and scripted answers)."""

import json

import pytest
from chat_server import ChatServer

from infrarsi.draft.assemble import _metrics
from infrarsi.draft.metrics import MetricsDraftError

STEPS = 4
# a step line no rule reads: the loss is "L", the time "dt" with a Greek delta
ODD = [(0.1 * i, f"[it {i}] L={3 - i / 10:.3f} \u0394t={100 + i}.0ms", "stdout") for i in range(4)]
GOOD = {"loss": r"L=([0-9.]+)", "step_time": {"pattern": r"\u0394t=([0-9.]+)ms", "unit": "ms"}}


def answering(reply: dict | str):
    asked = []

    def ask(system: str, user: str) -> str:
        asked.append(user)
        return reply if isinstance(reply, str) else f"```json\n{json.dumps(reply)}\n```"

    return ask, asked


def test_the_rules_first_and_the_llm_only_when_they_cannot_read_the_lines():
    plain = [
        (0.1 * i, f"step {i} loss {3 - i / 10:.2f} time {100 + i}ms", "stdout") for i in range(4)
    ]
    ask, asked = answering(GOOD)
    _, metrics, _ = _metrics(plain, STEPS, ask)
    assert not asked and metrics["step_time"]["unit"] == "ms"  # the rules read it
    lines, metrics, notes = _metrics(ODD, STEPS, ask)
    assert len(asked) == 1 and "[it 0] L=3.000" in asked[0]
    assert metrics == {"loss": GOOD["loss"], "step_time": GOOD["step_time"]}
    assert "drafted by the LLM" in notes[-1] and len(lines) == 4


@pytest.mark.parametrize(
    "reply, why",
    [
        (
            {**GOOD, "step_time": {"pattern": GOOD["step_time"]["pattern"], "unit": "s"}},
            "read the step time in s",
        ),
        ({"loss": r"([0-9.]+)"}, "matched"),  # every number on the line, not once per step
        ({"loss": r"L=[0-9.]+"}, "capture group"),
        ("I think the loss is L.", "not used"),
    ],
)
def test_a_wrong_draft_is_refused_with_the_rules_error_and_its_own(reply, why):
    ask, _ = answering(reply)
    with pytest.raises(MetricsDraftError, match=why) as refused:
        _metrics(ODD, STEPS, ask)
    assert "no line gave a loss once per step" in str(refused.value)  # the rules' error first


def test_without_an_endpoint_the_rules_error_stands(monkeypatch):
    monkeypatch.delenv("INFRARSI_LLM_BASE_URL", raising=False)
    with pytest.raises(MetricsDraftError, match="no line gave a loss") as refused:
        _metrics(ODD, STEPS)
    assert "LLM" not in str(refused.value)


def test_the_draft_asks_a_real_endpoint_from_the_environment(monkeypatch):
    chat = ChatServer([f"Here:\n```json\n{json.dumps(GOOD)}\n```"])
    try:
        for key, value in chat.env.items():
            monkeypatch.setenv(key, value)
        _, metrics, _ = _metrics(ODD, STEPS)
    finally:
        chat.close()
    assert metrics["loss"] == GOOD["loss"] and "steps ran" in chat.prompt(0)
