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


def configured() -> bool:
    """True when an endpoint and a model are set in the environment."""
    return bool(os.environ.get(ENV_URL) and os.environ.get(ENV_MODEL))


def complete(system: str, user: str, timeout_s: float = 60.0) -> str:
    """The model's reply to one system and one user message, at temperature 0."""
    from openai import OpenAI

    client = OpenAI(
        base_url=os.environ[ENV_URL],
        api_key=os.environ.get(ENV_KEY, "not-needed"),
        timeout=timeout_s,
        max_retries=1,
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


def short(exc: Exception) -> str:
    """Why a draft was not used, in one line."""
    if isinstance(exc, ValidationError):
        return "invalid answer: " + "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
        )
    return f"{type(exc).__name__}: {str(exc)[:200]}"
