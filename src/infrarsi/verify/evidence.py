"""Checks on the evidence the harness owns: the final parameters each trial saved (in the
reference layout) and the held-out loss the unpatched model code gives them.

Each check returns the reasons it fails and the parts that could not be checked (a workload
that saves no parameters, or declares no evaluation): a verdict says both.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from infrarsi.contract import Contract
from infrarsi.records.trial import Evaluation, TrialRecord

if TYPE_CHECKING:  # torch is imported where weights are read: a command that never reads
    import torch  # any (bad input, a verdict from records) starts without it

FROZEN_SHARE = 1e-3  # a parameter that moved less than this share of the baseline's move
INIT_RTOL = 1e-6  # the same seed gives the same initial parameters, to rounding


@dataclass
class Findings:
    """Reasons a candidate fails, and what could not be checked."""

    reasons: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)


def check(
    contract: Contract,
    baseline: TrialRecord,
    cand: TrialRecord,
    bf16: bool,
    kinds: frozenset[str] = frozenset(),
) -> Findings:
    """Every check on parameters and held-out loss, with the tolerances for this precision and
    these kinds of change. Evidence the baseline has and the candidate lacks is a failure: a
    candidate cannot pass by leaving the harness nothing to check."""
    found = Findings()
    b, c = baseline.evaluation, cand.evaluation
    if b is None:
        found.not_checked.append(
            "final parameters and held-out loss: the workload declares "
            "no evaluation (manifest 'evaluation')"
            if c is None
            else "final parameters and held-out loss: the baseline has none"
        )
        return found
    if c is None:
        found.reasons.append(
            "the candidate left no evaluation where the baseline has one: "
            "nothing the harness can check is not a pass"
        )
        return found
    for who, ev in (("baseline", b), ("candidate", c)):
        if ev.error:
            (found.reasons if who == "candidate" else found.not_checked).append(
                f"the {who}'s parameters could not be checked: {ev.error}"
            )
    if found.reasons or b.final_weights is None:
        return found
    if c.final_weights is None:
        found.reasons.append("the candidate saved no final parameters; the baseline did")
        return found
    weight_tol, eval_tol = contract.equivalence.tolerances(bf16, kinds)
    hint = _hint(contract, kinds)
    found.reasons += [
        f"the reference model cannot hold the candidate's parameters: {p}"
        for p in c.layout_problems
    ]
    if not c.layout_problems:
        _weights(found, b, c, weight_tol, hint)
        _held_out(found, b, c, eval_tol, contract.correctness.loss_rtol(bf16), hint)
    return found


def _hint(contract: Contract, kinds: frozenset[str]) -> str:
    """What to do when a tolerance that judged a change was never calibrated for it."""
    missing = contract.equivalence.uncalibrated(kinds - {"precision"})
    if not missing:
        return ""
    return (
        f" [judged by the strict base tolerance: no tolerance was calibrated for a change "
        f"of {', '.join(missing)}; run doctor to calibrate it]"
    )


def load_params(path: str | None) -> dict[str, torch.Tensor] | None:
    """Parameters (name -> tensor) saved at ``path``; None for no path."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True) if path else None


def challenge_unseen(baselines: list[TrialRecord]) -> str | None:
    """Why a challenge seed cannot be seen to have taken effect: two baselines run at
    different seeds began from the same parameters and ran the same loss curve (a script that
    ignores the seed the harness set), so a result prepared for one seed would pass at every
    one. None when the seeds moved the runs, or when there is nothing to tell it by."""
    seeded = [b for b in baselines if b.seed is not None and _initial(b)]
    if len(seeded) < 2:
        return None
    first = seeded[0]
    for other in seeded[1:]:
        same_curve = first.metrics and other.metrics and first.metrics.loss == other.metrics.loss
        if other.seed == first.seed or not same_curve:
            continue
        w0, c0 = load_params(_initial(first)), load_params(_initial(other))
        if w0 and c0 and set(w0) == set(c0) and start_distance(w0, c0) <= INIT_RTOL:
            return (
                f"challenge seed: no effect seen (the baselines at seeds {first.seed} and "
                f"{other.seed} began from the same parameters and ran the same curve: a "
                "result prepared for one seed would pass at every one)"
            )
    return None


def _initial(record: TrialRecord) -> str | None:
    return record.evaluation.initial_weights if record.evaluation else None


def start_distance(w0: dict[str, Any], c0: dict[str, Any]) -> float:
    """``|C_0 - W_0| / |W_0|``: how far one run's initial parameters are from another's (the
    same seed gives the same, to ``INIT_RTOL``)."""
    return _norm(c0[n] - w0[n] for n in w0) / max(_norm(w0.values()), 1e-12)


def known_params(path: str | None, aliases: dict[str, str]) -> dict[str, torch.Tensor] | None:
    """The parameters at ``path``, each under the reference model's own name for it (a tied
    parameter saved under another of its names is the same parameter)."""
    params = load_params(path)
    if params is None:
        return None
    return {aliases.get(name, name): tensor for name, tensor in params.items()}


def weight_distance(
    wb: dict[str, Any],
    wc: dict[str, Any],
    w0: dict[str, Any],
    inert: AbstractSet[str] = frozenset(),
) -> float:
    """``|W_c - W_b| / |W_b - W_0|`` over the parameters that are not inert: how far the
    candidate's final parameters are from the baseline's, as a share of what it learned."""
    names = [n for n in wb if n not in inert]
    return _norm(wc[n] - wb[n] for n in names) / max(_norm(wb[n] - w0[n] for n in names), 1e-12)


def held_out_share(eb: float, ec: float, e0: float) -> float:
    """``|E_c - E_b| / (E_0 - E_b)``: the held-out loss difference as a share of the
    baseline's held-out improvement."""
    return abs(ec - eb) / max(e0 - eb, 1e-12)


def _norm(tensors: Iterable[torch.Tensor]) -> float:
    total = sum((float((t.double() ** 2).sum()) for t in tensors), 0.0)
    return math.sqrt(total)


def _weights(found: Findings, b: Evaluation, c: Evaluation, tol: float, hint: str = "") -> None:
    """The candidate's final parameters against the baseline's (``b``, ``c``: what the harness
    evaluated of each; both saved final parameters)."""
    names = {**b.aliases, **c.aliases}
    wb, wc = known_params(b.final_weights, names), known_params(c.final_weights, names)
    w0, c0 = known_params(b.initial_weights, names), known_params(c.initial_weights, names)
    if wb is None or wc is None:
        found.reasons.append("the final parameters could not be read")
        return
    if set(wb) != set(wc):
        found.reasons.append(
            f"the parameters differ from the baseline's: {sorted(set(wb) ^ set(wc))[:6]}"
        )
        return
    shapes = [n for n in wb if wb[n].shape != wc[n].shape]
    if shapes:
        found.reasons.append(f"parameter shapes differ from the baseline's: {shapes[:6]}")
        return
    if w0 is None:
        found.not_checked.append(
            "weights relative to what was learned: the baseline saved no initial parameters"
        )
        return
    if c0 is None:
        found.reasons.append("the candidate saved no initial parameters; the baseline did")
    elif set(c0) == set(w0):
        start = start_distance(w0, c0)
        if start > INIT_RTOL:
            found.reasons.append(
                f"the initial parameters differ from the baseline's by {start:.1e}"
                " (relative): another seed or initialisation"
            )
    inert = set(b.inert_params)
    distance = weight_distance(wb, wc, w0, inert)
    if distance > tol:
        found.reasons.append(
            f"final parameters differ from the baseline's by {distance:.2e} of "
            f"what the baseline learned (tolerance {tol:.1e}): the candidate "
            f"trained a different model{hint}"
        )
    frozen = frozen_params(wb, wc, w0, inert)
    if frozen:
        found.reasons.append(f"parameters that did not train: {frozen[:6]}")


def frozen_params(
    wb: dict[str, Any], wc: dict[str, Any], w0: dict[str, Any], inert: set[str]
) -> list[str]:
    """Parameters the baseline moved and the candidate (almost) did not. A parameter whose
    gradient is zero in the reference model (``inert``: the baseline moved it by rounding
    alone, e.g. an attention key bias that softmax cancels) is no evidence either way."""
    return [
        n
        for n in wb
        if n not in inert
        and _norm([wb[n] - w0[n]]) > 0
        and _norm([wc[n] - w0[n]]) < FROZEN_SHARE * _norm([wb[n] - w0[n]])
    ]


def _held_out(
    found: Findings,
    b: Evaluation,
    c: Evaluation,
    tol: float,
    loss_rtol: float,
    hint: str = "",
) -> None:
    """The candidate's held-out loss (reference code) against the baseline's."""
    eb, ec, e0 = b.eval_loss, c.eval_loss, b.initial_eval_loss
    if eb is None:
        found.not_checked.append("held-out loss: no evaluation command")
        return
    if ec is None:
        found.reasons.append("the candidate has no held-out loss; the baseline has one")
        return
    if abs(ec / eb - 1) > loss_rtol:
        found.reasons.append(
            f"held-out loss (reference code) {ec:.5f} vs the baseline's "
            f"{eb:.5f}: {abs(ec / eb - 1):.2%} (tolerance {loss_rtol:.2%})"
        )
    if e0 is None or e0 <= eb:
        found.not_checked.append(
            "held-out loss relative to what was learned: no initial "
            "evaluation, or the baseline did not improve it"
        )
        return
    share = held_out_share(eb, ec, e0)
    if share > tol:
        found.reasons.append(
            f"held-out loss differs by {share:.2e} of the baseline's held-out "
            f"improvement (tolerance {tol:.1e}): it learned something else"
            f"{hint}"
        )
