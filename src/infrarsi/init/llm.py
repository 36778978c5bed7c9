"""Optional: an LLM drafts the reading of the instruction, through an OpenAI-compatible API.

Configured by ``INFRARSI_LLM_BASE_URL`` and ``INFRARSI_LLM_MODEL`` (``INFRARSI_LLM_API_KEY`` if the
endpoint needs one). The draft is validated as strictly as the rules' reading (sizes need a
unit, files must exist, the tolerance is a fraction) and goes through the same confirmation;
when the endpoint fails or answers something invalid, the rules' reading is kept and the
reason is shown. Offline, the rules alone are complete.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from infrarsi import llm
from infrarsi.init.parse import Reading
from infrarsi.units import parse_bytes

SYSTEM_PROMPT = """You turn an engineer's instruction about speeding up a PyTorch training job
into JSON with exactly these keys:
  "objective": "e2e_time" or "tokens_per_s" or null,
  "loss_tolerance": relative loss drift allowed as a fraction (0.5% -> 0.005) or null,
  "mem_cap": memory capacity per rank with an explicit unit ("2GiB", "40GB") or null,
  "lock": list of files (from the given list only) that must not be edited,
  "budget_trials": integer or null, "budget_wall_time_s": seconds or null,
  "not_understood": list of the instruction's clauses you could not map to any key.
Answer with the JSON object only."""


class LLMDraft(BaseModel):
    """The LLM's answer, validated strictly before it may become a contract."""

    model_config = ConfigDict(extra="forbid")
    objective: str | None = Field(None, pattern="^(e2e_time|tokens_per_s)$")
    loss_tolerance: float | None = Field(None, gt=0, lt=1)
    mem_cap: str | None = None
    lock: list[str] = []
    budget_trials: int | None = Field(None, gt=0)
    budget_wall_time_s: float | None = Field(None, gt=0)
    not_understood: list[str] = []

    @field_validator("mem_cap")
    @classmethod
    def _strict_size(cls, value: str | None) -> str | None:
        if value is not None:
            parse_bytes(value)
        return value


def llm_configured() -> bool:
    """True when an endpoint and a model are set in the environment."""
    return llm.configured()


def draft_reading(
    instruction: str, files: list[str], rules: Reading, on_note: Callable[[str], None]
) -> tuple[Reading, str]:
    """(the LLM's reading, "llm"), or (the rules' reading, "rules") when the LLM's is unusable;
    ``on_note`` (the screen's) is told why a draft was not used."""
    answer = ""
    on_note(f"asking the LLM endpoint for a reading (up to {llm.timeout_s():g} s) ...")
    try:
        answer = _ask(instruction, files)
        draft = LLMDraft.model_validate(json.loads(llm.json_object(answer)))
        unknown = sorted(set(draft.lock) - set(files))
        if unknown:
            raise ValueError(f"it locks files the workload does not have: {unknown}")
    except Exception as exc:  # any failure of the optional path falls back to the rules
        on_note(
            f"the LLM draft was not used ({llm.short(exc, answer)}); the contract comes from the "
            "deterministic rules"
        )
        return rules, "rules"
    return Reading(
        objective=draft.objective,
        loss_tolerance=draft.loss_tolerance,
        mem_cap_bytes=parse_bytes(draft.mem_cap) if draft.mem_cap else None,
        lock=draft.lock,
        budget_trials=draft.budget_trials,
        budget_wall_time_s=draft.budget_wall_time_s,
        understood=[(instruction, "drafted by the LLM")],
        not_understood=draft.not_understood,
    ), "llm"


def _ask(instruction: str, files: list[str]) -> str:
    return llm.complete(SYSTEM_PROMPT, f"Files: {files}\nInstruction: {instruction}")
