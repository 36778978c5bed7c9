"""A chat completion through any OpenAI-compatible endpoint, for the parts of InfraRSI that
may ask an LLM for a draft (the contract's reading, a manifest's log patterns). Configured by
``INFRARSI_LLM_BASE_URL`` and ``INFRARSI_LLM_MODEL`` (``INFRARSI_LLM_API_KEY`` if the endpoint
needs one). What comes back is only ever a draft: each caller validates it as strictly as its
rules' own and falls back on them, saying why, when it is unusable."""

from __future__ import annotations

import os
import re

from pydantic import ValidationError

ENV_URL, ENV_MODEL, ENV_KEY = "INFRARSI_LLM_BASE_URL", "INFRARSI_LLM_MODEL", "INFRARSI_LLM_API_KEY"
ENV_TIMEOUT = "INFRARSI_LLM_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 30.0  # a hung endpoint costs at most this, once: then the rules answer


def timeout_s() -> float:
    """Seconds one LLM request may take (``INFRARSI_LLM_TIMEOUT_S``, default 30)."""
    try:
        value = float(os.environ.get(ENV_TIMEOUT, DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if value > 0 else DEFAULT_TIMEOUT_S


def configured() -> bool:
    """True when an endpoint and a model are set in the environment."""
    return bool(os.environ.get(ENV_URL) and os.environ.get(ENV_MODEL))


def complete(system: str, user: str, limit_s: float | None = None) -> str:
    """The model's reply to one system and one user message, at temperature 0, within
    ``limit_s`` (default ``timeout_s()``), not retried."""
    from openai import OpenAI

    client = OpenAI(
        base_url=os.environ[ENV_URL],
        api_key=os.environ.get(ENV_KEY, "not-needed"),
        timeout=limit_s or timeout_s(),
        max_retries=0,
    )
    reply = client.chat.completions.create(
        model=os.environ[ENV_MODEL],
        temperature=0,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
    )
    return reply.choices[0].message.content or ""


def json_object(text: str) -> str:
    """The JSON object in a reply (fences and prose around it dropped)."""
    match = re.search(r"\{.*\}", text, re.DOTALL)
    return match.group(0) if match else text


def short(exc: Exception, reply: str = "") -> str:
    """Why a draft was not used, in one line of the project's words: a reply that is not
    JSON (its first characters shown), an answer whose fields do not fit, an endpoint that
    did not answer in time or could not be reached."""
    import json

    if isinstance(exc, ValidationError):
        return "the answer's fields do not fit: " + "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
        )
    if isinstance(exc, json.JSONDecodeError):
        shown = " ".join(reply.split())[:80] if reply else exc.doc[:80]
        return f"the reply is not a JSON object (it read: {shown!r})"
    name = type(exc).__name__
    if name == "APITimeoutError":
        return f"the endpoint did not answer within {timeout_s():g} s ({ENV_TIMEOUT})"
    if name == "APIConnectionError":
        return "the endpoint could not be reached"
    return f"{name}: {str(exc)[:200]}"
