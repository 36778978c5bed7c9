"""How a peer's sampler (Optuna's, SMAC's) sees a problem, and how its proposals come back as
candidates: one encoding for every peer, so each runs exactly the config it proposed.

Each free knob is a parameter — numbers as an ordinal index over their levels (the sampler sees
their order), other values categorical — and derived knobs follow the others, as they do for
the user. The patches are one boolean each when every subset of them occurs among the
candidates; otherwise (a catalog whose patches exclude each other, a table measured with some
patch sets only) one categorical parameter over the patch sets the candidates have — the way a
user of these tools writes a choice among alternatives, so that no point of the sampler's space
names a patch set that cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infrarsi.identity import canonical_value
from infrarsi.run.problem import Problem
from infrarsi.run.searcher_base import Searcher
from infrarsi.run.space import Config, Dim

PATCH_SET = "+patches"  # the categorical parameter of the patch sets (no knob starts with '+')
NO_PATCH = "none"


@dataclass(frozen=True)
class Param:
    """One parameter of a peer's space: an ordinal index ``0..n-1`` (``kind`` "int") or a
    choice among ``choices`` ("cat"; booleans for a patch of its own)."""

    name: str
    kind: str
    choices: tuple[Any, ...]


class PeerSpace:
    """A problem as a peer's parameters (see the module's docstring)."""

    def __init__(self, problem: Problem):
        self.problem = problem
        self.dims: list[Dim] = [d for d in problem.space.dims if d.name not in problem.derived]
        subsets = {frozenset(c.patches) for c in problem.candidates}
        patches = list(problem.space.patches)
        self.patch_sets: list[str] | None = (
            None
            if len(subsets) == 2 ** len(patches)
            else sorted((_set_name(s) for s in subsets), key=lambda n: (n != NO_PATCH, n))
        )

    def params(self) -> list[Param]:
        """The peer's parameters, in a fixed order."""
        out = [
            Param(d.name, "int", tuple(range(len(d.levels))))
            if d.kind == "num"
            else Param(d.name, "cat", tuple(str(v) for v in d.levels))
            for d in self.dims
        ]
        if self.patch_sets is not None:
            return out + [Param(PATCH_SET, "cat", tuple(self.patch_sets))]
        return out + [Param("+" + p, "cat", (False, True)) for p in self.problem.space.patches]

    def values(self, config: Config) -> dict[str, Any]:
        """A candidate as the peer's parameter values."""
        knobs, out = config.knob_dict, {}
        for dim in self.dims:
            value = canonical_value(knobs.get(dim.name, dim.levels[0]))
            level = next(i for i, v in enumerate(dim.levels) if canonical_value(v) == value)
            out[dim.name] = level if dim.kind == "num" else str(dim.levels[level])
        if self.patch_sets is not None:
            out[PATCH_SET] = _set_name(config.patches)
        else:
            out.update({"+" + p: p in config.patches for p in self.problem.space.patches})
        return out

    def config(self, values: dict[str, Any]) -> tuple[Config | None, Config]:
        """The candidate the parameter values name (None when no candidate is that config),
        and the config they name either way."""
        knobs = {}
        for dim in self.dims:
            value = values[dim.name]
            knobs[dim.name] = (
                dim.levels[int(value)]
                if dim.kind == "num"
                else next(v for v in dim.levels if canonical_value(v) == canonical_value(value))
            )
        if self.patch_sets is not None:
            chosen = str(values[PATCH_SET])
            patches = [] if chosen == NO_PATCH else chosen.split("+")
        else:
            patches = [p for p in self.problem.space.patches if _true(values["+" + p])]
        target = Config.of(knobs, patches)
        return self.problem.by_free_key().get(self.problem.free_key(target)), target


def _set_name(patches: frozenset[str] | set[str]) -> str:
    return "+".join(sorted(patches)) or NO_PATCH


def _true(value: Any) -> bool:
    """A boolean parameter's value (SMAC may hand back 'True'/'False' as text)."""
    return value is True or str(value) == "True"


class PeerSearcher(Searcher):
    """A peer whose sampler proposes parameter values: the ask loop every peer shares.

    A proposal the analytic memory estimate says does not fit is told infeasible without
    running (the prefilter a user of any tool could apply) and the sampler asks again; after
    ``ASK_TRIES`` such proposals in a row the last one runs as proposed. A proposal that names
    no candidate is a config the workload refuses: told infeasible, free, and asked again — except
    on an incomplete problem (a sampled table), where it runs the nearest untried candidate
    instead (counted in ``snapped``; on a complete problem that happens only when
    ``ASK_TRIES`` proposals in a row named no candidate). ``proposed`` is the config the
    sampler last proposed, which the benchmark checks against what ran."""

    def __init__(self, problem: Problem, seed: int = 0):
        super().__init__(problem, seed)
        self.peer_space = PeerSpace(problem)
        self.fits = dict(zip(problem.candidates, problem.analytic_fits()))
        self.fits.update({c: True for c in problem.start_points()})  # always run as given
        self.pending: dict[Config, Any] = {}
        self.proposed: Config | None = None
        self.exact = self.snapped = 0  # trials run as proposed / run at a nearest candidate

    def _propose(self) -> tuple[Any, dict[str, Any]] | None:
        """Ask the sampler: (its handle for the proposal, the proposed parameter values), or
        None when it has nothing left to propose."""
        raise NotImplementedError

    def _refuse(self, handle: Any, unfit: bool) -> None:
        """Tell the sampler a proposal did not run: it does not fit (``unfit``) or names no
        config the workload accepts."""
        raise NotImplementedError

    def ask(self) -> Config | None:
        target: Config | None = None
        for attempt in range(ASK_TRIES):
            proposal = self._propose()
            if proposal is None:  # the sampler has nothing left to propose
                break
            handle, values = proposal
            found, target = self.peer_space.config(values)
            if found is None:
                self._refuse(handle, unfit=False)
                if not self.problem.complete:
                    break
                continue
            if not self.fits.get(found, True) and attempt < ASK_TRIES - 1:
                self._refuse(handle, unfit=True)
                continue
            self.pending[found] = handle  # already run or not: a repeat is a new measurement
            self.exact += 1
            self.proposed = found
            return found
        self.proposed = None
        found = self.problem.nearest(target or self.problem.baseline, self.tried, self.rng)
        if found is not None:
            self.pending[found] = None
            self.snapped += 1
        return found


ASK_TRIES = 20
