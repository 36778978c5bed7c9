"""The searchers the benchmark replays besides the registry's: its own peers (SMAC, TPE guided
by the catalog's priors, TPE with successive halving over steps) and InfraRSI with one idea
taken out. Kept apart from the replay's
rules (``replay.py``), so adding a peer changes no rule a table was measured to judge."""

from __future__ import annotations

from infrarsi.run import searchers as registry
from infrarsi.run.problem import Problem

PEERS = ("smac", "tpe-prior", "tpe-asha")  # benchmark-only peers, beside the registry's
MODEL_PEERS = ("tpe", "gp", "smac", "tpe-prior", "tpe-asha")  # a sampler proposes: what ran
# must be what it proposed
ABLATIONS = {  # InfraRSI with one idea taken out (or, where it was taken out, put back)
    "infrarsi-no-prior": {"prior": False},
    "infrarsi-no-censor": {"censored": False},
    "infrarsi-with-pairing": {"pairing": True},  # off since the local search (2026-12-05)
    "infrarsi-no-cut": {"cut_slow": False},
}


def make_searcher(name: str, problem: Problem, seed: int):
    """A registered searcher, a benchmark peer, or an InfraRSI ablation."""
    if name == "smac":
        from smac_peer import SMACSearcher  # a benchmark extra (scripts/setup.sh installs it)

        return SMACSearcher(problem, seed)
    if name == "tpe-asha":
        from fidelity_peer import FidelitySearcher

        return FidelitySearcher(problem, seed)
    if name == "tpe-prior":
        from infrarsi.run.optuna_peers import OptunaSearcher

        return OptunaSearcher(problem, seed, sampler="tpe-prior")
    if name in ABLATIONS:
        from infrarsi.run.infrarsi_searcher import InfraRSISearcher

        options = {k: v for k, v in ABLATIONS[name].items() if k != "prior"}
        return InfraRSISearcher(problem, seed, **options)
    return registry.make(name, problem, seed)
