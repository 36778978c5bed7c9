"""Optional: an LLM drafts the reading of the instruction, through an OpenAI-compatible API.

Configured by ``INFRARSI_LLM_BASE_URL`` and ``INFRARSI_LLM_MODEL`` (and ``INFRARSI_LLM_API_KEY``
if the endpoint needs one). The draft passes through the same validation and the same
confirmation as the rules' reading; offline, the rules alone are complete.
"""

from __future__ import annotations

import os

from rich.console import Console

from infrarsi.init.parse import Reading


def llm_configured() -> bool:
    """True when an endpoint and a model are set in the environment."""
    return bool(os.environ.get("INFRARSI_LLM_BASE_URL") and os.environ.get("INFRARSI_LLM_MODEL"))


def draft_reading(instruction: str, files: list[str], rules: Reading, err: Console) -> Reading:
    """Not built yet: say so and keep the rules' reading (nothing is sent anywhere)."""
    err.print("note: an LLM endpoint is configured, but LLM drafting is not built yet; "
              "the contract comes from the deterministic rules", markup=False)
    return rules
