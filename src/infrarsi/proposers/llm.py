"""The patch agent: code patches written by any OpenAI-compatible LLM (a hosted API, or a
local vLLM, llama.cpp or Ollama server), validated before they cost a trial, learned from when
they fail.

The endpoint is ``INFRARSI_LLM_BASE_URL`` with the model ``INFRARSI_LLM_MODEL`` (and
``INFRARSI_LLM_API_KEY`` where one is needed). Each ``propose`` is one chat request (the
``prompt`` module's messages) and at most one patch: the reply is parsed (``reply``) and
validated (``validate``); every reply leaves a line in ``proposals.jsonl`` with its stage,
reason, tokens and seconds, and the next prompt carries it. Calls, tokens and seconds are
capped per run (``LLMBudget``). A round of proposing asks again at once after a rejection
(the reply's reason in the next prompt), up to ``calls_per_round`` requests, and ends at the
first accepted patch, which the search then measures before the next round. Transport errors
are retried with backoff by the client; an
endpoint that cannot be reached, or refuses the key, gives one note and no more calls — the
run goes on with the catalog.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infrarsi.contract import Contract
from infrarsi.errors import InfraRSIError
from infrarsi.executors import Executor
from infrarsi.llm import timeout_s as timeout
from infrarsi.options import LLMBudget
from infrarsi.proposal import (
    LLM_PREFIX,
    PROPOSALS_DIR,
    ProposalLine,
    ProposalState,
    ProposalStatus,
    ProposedPatch,
    TrialSink,
    append_line,
    read_lines,
)
from infrarsi.proposers.prompt import messages
from infrarsi.proposers.reply import ReplyRejected, parse_reply
from infrarsi.proposers.validate import Validator
from infrarsi.records import DoctorReport
from infrarsi.redact import masked_url, scrub

ENV_URL, ENV_MODEL, ENV_KEY = "INFRARSI_LLM_BASE_URL", "INFRARSI_LLM_MODEL", "INFRARSI_LLM_API_KEY"


REACH_TIMEOUT_S = 3.0  # how long an endpoint may take to accept a connection up front


class EndpointError(InfraRSIError):
    """The LLM endpoint is not configured; the message names the variables to set."""


@dataclass(frozen=True)
class Endpoint:
    """Where the chat requests go."""

    base_url: str
    model: str
    api_key: str = "not-needed"
    timeout_s: float = 120.0
    retries: int = 2  # the client's own retries, with exponential backoff

    @classmethod
    def from_env(cls) -> Endpoint:
        url, model = os.environ.get(ENV_URL), os.environ.get(ENV_MODEL)
        if not url or not model:
            raise EndpointError(
                f"the LLM proposer needs an endpoint: set {ENV_URL} (e.g. "
                f"http://127.0.0.1:8000/v1 for a local vLLM server) and "
                f"{ENV_MODEL} ({ENV_KEY} if it needs a key)"
            )
        # a request waits at most INFRARSI_LLM_TIMEOUT_S (30 s) and is not retried: a hung
        # endpoint costs the run half a minute a request, said, never minutes of silence
        return cls(url, model, os.environ.get(ENV_KEY) or "not-needed", timeout(), retries=0)

    def check_reachable(self, timeout_s: float = REACH_TIMEOUT_S) -> None:
        """EndpointError naming the address and the fix unless a TCP connection to the
        endpoint's host opens within ``timeout_s`` (the client would retry for minutes)."""
        import socket
        from urllib.parse import urlsplit

        parts = urlsplit(self.base_url)
        if not parts.hostname:
            raise EndpointError(
                f"{ENV_URL}={masked_url(self.base_url)!r} is not a URL: give e.g. http://127.0.0.1:8000/v1"
            )
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
        except OSError as exc:
            raise EndpointError(
                f"no LLM endpoint answers at {masked_url(self.base_url)} "
                f"({exc.strerror or exc}); start "
                f"the server, fix {ENV_URL}, or run with --proposer catalog"
            ) from None


def configured() -> bool:
    """Whether an endpoint and a model are set in the environment."""
    return bool(os.environ.get(ENV_URL) and os.environ.get(ENV_MODEL))


class LLMProposer:
    """Proposes one patch per call; ``searches_catalog``: whether the catalog is searched too
    (``--proposer both``), and always once the endpoint is unusable."""

    name = "llm"

    def __init__(
        self,
        contract: Contract,
        run_dir: Path,
        executor: Executor,
        endpoint: Endpoint,
        budget: LLMBudget = LLMBudget(),
        report: DoctorReport | None = None,
        with_catalog: bool = True,
        on_note: Callable[[str], None] | None = None,
    ):
        self.contract, self.run_dir, self.report = contract, Path(run_dir), report
        self.endpoint, self.budget, self.with_catalog = endpoint, budget, with_catalog
        self.on_note = on_note or (lambda text: None)
        self.validator = Validator(contract, run_dir, executor)
        self.dead: str | None = None  # why the endpoint is not asked again
        self._client: Any = None  # the OpenAI client, made on the first request

    # -- the interface ---------------------------------------------------------------------
    @property
    def searches_catalog(self) -> bool:
        return self.with_catalog or self.dead is not None

    def accepted(self) -> list[ProposedPatch]:
        return [
            ProposedPatch.of_line(line)
            for line in read_lines(self.run_dir)
            if line.status is ProposalStatus.ACCEPTED and line.patch_id
        ]

    def wants_more(self) -> bool:
        lines = read_lines(self.run_dir)
        return (
            self.dead is None
            and len(lines) < self.budget.calls
            and sum(x.tokens for x in lines) < self.budget.tokens
            and sum(x.seconds for x in lines) < self.budget.seconds
        )

    def propose(
        self, state: ProposalState, on_trial: TrialSink | None = None
    ) -> list[ProposedPatch]:
        """One round: requests until a patch is accepted, the round's cap or the budget; each
        smoke trial told to ``on_trial`` as it ends."""
        for _ in range(self.budget.calls_per_round):
            if not self.wants_more():
                break
            accepted = self._one(state, on_trial)
            if accepted:
                return accepted
        return []

    def _one(self, state: ProposalState, on_trial: TrialSink | None) -> list[ProposedPatch]:
        """One request, one reply, validated; the accepted patch (or nothing)."""
        history = read_lines(self.run_dir)
        asked = messages(self.contract, self.report, history, state.outcomes)
        prompt_sha = hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()
        t0 = time.monotonic()
        try:
            text, tokens = self._ask(asked)
        except Exception as exc:  # noqa: BLE001 - any transport failure ends the LLM path
            self.dead = _why(exc, self.endpoint)
            self.on_note(
                f"the LLM proposer stops: {self.dead}; the run goes on with the workload's catalog"
            )
            return []
        line = self._judge(len(history) + 1, text, tokens, prompt_sha, t0, on_trial)
        append_line(self.run_dir, line)
        self.on_note(f"LLM proposal {line.n}: {line.status} at {line.stage}: {line.reason}"[:300])
        return [ProposedPatch.of_line(line)] if line.status is ProposalStatus.ACCEPTED else []

    # -- the parts -------------------------------------------------------------------------
    def _ask(self, asked: list[dict]) -> tuple[str, int]:
        if self._client is None:
            from openai import OpenAI

            self._client = OpenAI(
                base_url=self.endpoint.base_url,
                api_key=self.endpoint.api_key,
                timeout=self.endpoint.timeout_s,
                max_retries=self.endpoint.retries,
            )
        reply = self._client.chat.completions.create(
            model=self.endpoint.model, messages=asked, temperature=0.2
        )
        text = (reply.choices[0].message.content or "") if reply.choices else ""
        usage = getattr(reply, "usage", None)
        tokens = (
            int(getattr(usage, "total_tokens", 0) or 0)
            or (sum(len(m["content"]) for m in asked) + len(text)) // 4
        )  # no usage: ~4 chars/token
        return text, tokens

    def _judge(
        self,
        n: int,
        text: str,
        tokens: int,
        prompt_sha: str,
        t0: float,
        on_trial: TrialSink | None,
    ) -> ProposalLine:
        """The reply to request ``n`` judged: rejected with its reason, or accepted and
        written where the search finds it (each smoke trial told to ``on_trial``)."""
        base = dict(n=n, tokens=tokens, model=self.endpoint.model, prompt_sha256=prompt_sha)
        try:
            reply = parse_reply(text)
        except ReplyRejected as exc:
            return ProposalLine(
                status=ProposalStatus.REJECTED,
                stage="parse",
                reason=str(exc),
                seconds=time.monotonic() - t0,
                **base,
            )
        checked = self.validator.check(reply.diff, on_trial=on_trial)
        sha = checked.sha256
        if checked.ok and sha in {
            x.diff_sha256 for x in read_lines(self.run_dir) if x.status is ProposalStatus.ACCEPTED
        }:
            checked = type(checked)(
                False, "parse", "the same diff as an accepted proposal", checked.diff
            )
        seconds = time.monotonic() - t0
        flagged = f" (the screen flagged: {'; '.join(checked.flags[:3])})" if checked.flags else ""
        if not checked.ok:
            return ProposalLine(
                status=ProposalStatus.REJECTED,
                stage=checked.stage,
                reason=checked.reason + flagged,
                diff_sha256=sha,
                seconds=seconds,
                **base,
            )
        if sha is None or checked.diff is None:
            raise ValueError("an accepted proposal carries its canonical diff")
        patch_id = f"{PROPOSALS_DIR}/{LLM_PREFIX}{sha[:12]}.diff"
        (self.run_dir / patch_id).write_text(checked.diff)
        reason = "passed every check" + flagged + (f"; {reply.note}" if reply.note else "")
        return ProposalLine(
            status=ProposalStatus.ACCEPTED,
            stage="smoke",
            reason=reason,
            diff_sha256=sha,
            seconds=seconds,
            patch_id=patch_id,
            expectation=reply.expectation,
            smoke_speedup=checked.smoke_speedup,
            **base,
        )


def _why(exc: Exception, endpoint: Endpoint) -> str:
    """One sentence for a failed request: unreachable, refused key, or the server's error
    (the endpoint's URL shown with any password masked)."""
    name, shown = type(exc).__name__, masked_url(endpoint.base_url)
    if name in ("APIConnectionError", "APITimeoutError"):
        return f"the endpoint {shown} cannot be reached ({name})"
    if name in ("AuthenticationError", "PermissionDeniedError"):
        return f"the endpoint {shown} refused the key ({name}): set {ENV_KEY}"
    if name == "NotFoundError":
        return f"the endpoint {shown} has no model {endpoint.model!r} ({name})"
    return f"the endpoint {shown} failed: {name}: {scrub(str(exc)[:200], endpoint.base_url)}"
