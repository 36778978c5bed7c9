"""The reference runs Apply measures so that ``verify`` can judge a patch differentially.

A candidate with other knobs than the baseline's and a patch is judged against the same knobs
without the patch (and, in bf16, against its knobs at fp32 with and without it:
``verify.reference.needed``). Apply measures each such run once per config and challenge seed (a
round's) — candidates that share knobs share their reference — on the host of the rounds, under
the contract's capacity; a reference that runs out of memory there (the patch is what makes the
knobs fit) runs again uncapped, and the verdict says so. Each run goes into the run's store as
it ends, with what it is a reference of (``ledger``): a resumed Apply does not run it again.
"""

from __future__ import annotations

import json
from typing import Any

from infrarsi.apply.ledger import ApplyLedger
from infrarsi.contract import Contract
from infrarsi.executors import Executor, TrialRequest
from infrarsi.identity import Configuration, config_key
from infrarsi.records import ReferenceRun
from infrarsi.records.trial import TrialStatus
from infrarsi.trial import TrialRecord
from infrarsi.verify.reference import References, Role, needed
from infrarsi.workloads import Manifest
from infrarsi.workloads import knobs as knob_rules

REFERENCE = "reference"  # the stored verdict's marker


class ReferenceRuns:
    """Measures, caches and stores the references of Apply's candidates."""

    def __init__(
        self,
        contract: Contract,
        manifest: Manifest | None,
        baseline_knobs: dict[str, Any],
        executor: Executor,
        ledger: ApplyLedger,
        steps: int | None = None,
    ) -> None:
        """``steps``: the optimizer steps the rounds run (None: the contract's)."""
        self.contract, self.manifest, self.executor = contract, manifest, executor
        self.steps = steps
        self.baseline_knobs, self.ledger = baseline_knobs, ledger
        self.records: dict[str, TrialRecord] = {}
        self.runs: dict[str, ReferenceRun] = {}
        self.measured: dict[str, TrialRecord] = {}  # the rounds' own runs, free to reuse
        self._resume()

    def offer(self, record: TrialRecord, patches: list[str]) -> None:
        """A run of the rounds (the baseline, a candidate) that ended ok: a candidate that
        needs a reference of the same config at the same seed uses it, at no extra trial."""
        if record.status is TrialStatus.OK:
            self.measured.setdefault(_key(record.knobs, patches, record.seed), record)

    def of(
        self, label: str, knobs: dict[str, Any], patches: list[str], seed: int | None = None
    ) -> References:
        """The references ``verify`` needs for this candidate at this challenge seed, measured
        where missing."""
        if self.manifest is None:
            return References()
        full = knob_rules.resolve(self.manifest, self.contract.scale, knobs)
        timed = self.contract.objective != "e2e_time"
        wanted = needed(self.manifest, self.baseline_knobs, full, patches, timed)
        found: dict[Role, TrialRecord] = {}
        for role, (ref_knobs, ref_patches) in wanted.items():
            key = _key(ref_knobs, ref_patches, seed)
            if key in self.measured:
                found[role] = self.measured[key]
                continue
            if key not in self.records:
                self._measure(role, key, ref_knobs, ref_patches, seed)
            run = self.runs[key]
            if label not in run.for_labels:
                self.runs[key] = run.model_copy(update={"for_labels": [*run.for_labels, label]})
            found[role] = self.records[key]
        return References.of(found)

    def again(self, record: TrialRecord) -> TrialRecord:
        """``record``'s configuration (a run without a patch: the baseline, or a same-knob
        reference) measured once more at its seed, so that a candidate's start line is judged
        against that configuration's start-ups, not one run's; measured once per config and
        seed, and stored like every reference."""
        key = _key(record.knobs, [], record.seed, Role.START_AGAIN)
        if key not in self.records:
            self._measure(Role.START_AGAIN, key, record.knobs, [], record.seed)
        return self.records[key]

    def _measure(
        self, role: Role, key: str, knobs: dict[str, Any], patches: list[str], seed: int | None
    ) -> None:
        record = self._run(knobs, patches, self.contract.mem_cap_bytes, seed)
        uncapped = record.status is TrialStatus.OOM and self.contract.mem_cap_bytes is not None
        if uncapped:
            record = self._run(knobs, patches, None, seed)
        run = ReferenceRun(
            role=str(role),
            knobs=knobs,
            patches=patches,
            seed=seed,
            trial_id=record.trial_id,
            trial_dir=record.trial_dir,
            status=record.status,
            uncapped=uncapped,
            cost_s=record.cost_s,
        )
        self.records[key], self.runs[key] = record, run
        verdict = {REFERENCE: key, "run": run.model_dump(mode="json")}
        self.ledger.add(record, f"reference {role} {key}", verdict)

    def _run(
        self, knobs: dict[str, Any], patches: list[str], cap: int | None, seed: int | None
    ) -> TrialRecord:
        request = TrialRequest.of(
            self.contract,
            Configuration.of(knobs, patches),
            mem_cap_bytes=cap,
            workdir="apply-trials",
            seed=seed,
            steps=self.steps,
        )
        return self.executor.wait(self.executor.submit(request))

    def _resume(self) -> None:
        """The references a killed Apply of this run already measured."""
        for verdict, record in self.ledger.entries():
            if REFERENCE in verdict and record is not None:
                key = verdict[REFERENCE]
                self.runs[key] = ReferenceRun.model_validate(verdict["run"])
                self.records[key] = record


def _key(
    knobs: dict[str, Any], patches: list[str], seed: int | None, again: Role | None = None
) -> str:
    """A reference's identity: its config and the seed it ran at (one host: Apply's); a run
    measured again (``again``) is another one of the same config."""
    parts: list[Any] = [config_key(knobs, patches), seed]
    return json.dumps(parts if again is None else [*parts, str(again)], default=str)
