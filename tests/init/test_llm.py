"""The optional LLM draft, against an OpenAI-compatible endpoint served on loopback.

The endpoint answers with a fixed draft; the real ``openai`` client talks real HTTP to it.
"""

import json
import os

import pytest
from chat_server import ChatServer
from conftest import run_cli


@pytest.fixture()
def endpoint():
    """A loopback endpoint answering every request with ``server.then`` (set per test)."""
    server = ChatServer([], model="test-model")
    yield server, server.env
    server.close()


def _init(env, tmp_path, instruction):
    old = dict(os.environ)
    os.environ.update(env)
    try:
        return run_cli(
            "init", "dense-1node", instruction, "-o", str(tmp_path / "c.yaml"), "--yes", "--json"
        )
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_a_valid_llm_draft_becomes_the_contract(endpoint, tmp_path):
    state, env = endpoint
    state.then = (
        "```json\n"
        + json.dumps(
            {
                "objective": "tokens_per_s",
                "loss_tolerance": 0.01,
                "mem_cap": "3GiB",
                "lock": ["data.py"],
                "budget_trials": 12,
                "budget_wall_time_s": None,
                "not_understood": ["in the style of a poem"],
            }
        )
        + "\n```"
    )
    result = _init(env, tmp_path, "go faster in tokens, 1% loss, 3 GiB, 12 runs, poem style")
    assert result.returncode == 0, result.stderr
    c = json.loads(result.stdout)
    assert c["contract"]["drafted_by"] == "llm" and c["objective"] == "tokens_per_s"
    assert c["mem_cap_bytes"] == 3 * 2**30 and c["budget_trials"] == 12
    assert c["not_understood"] == ["in the style of a poem"]
    assert state.requests[0]["model"] == "test-model"


def test_an_invalid_llm_draft_falls_back_to_the_rules(endpoint, tmp_path):
    state, env = endpoint
    state.then = json.dumps({"mem_cap": "16G", "lock": ["secret.py"]})
    result = _init(env, tmp_path, "Cut time; memory under 2 GiB")
    assert result.returncode == 0, result.stderr
    c = json.loads(result.stdout)
    assert c["contract"]["drafted_by"] == "rules" and c["mem_cap_bytes"] == 2 * 2**30
    assert "the LLM draft was not used" in result.stderr


def test_a_reply_that_cannot_be_read_is_said_in_the_projects_words(monkeypatch):
    import json

    from infrarsi import llm

    reply = "Sure! Here is what I think about your training job."
    try:
        json.loads(llm.json_object(reply))
    except json.JSONDecodeError as exc:
        said = llm.short(exc, reply)
    assert said == f"the reply is not a JSON object (it read: {reply[:80]!r})"
    monkeypatch.setenv("INFRARSI_LLM_TIMEOUT_S", "12")
    assert llm.timeout_s() == 12
    monkeypatch.setenv("INFRARSI_LLM_TIMEOUT_S", "soon")
    assert llm.timeout_s() == llm.DEFAULT_TIMEOUT_S == 30
