"""Apply's measurements: the baseline and the top candidates re-run interleaved — B, C1, C2, ...,
B, C1, ... and a closing B — at the contract's scale, each candidate checked by ``verify``
against the baseline of its round (and, for a patch with other knobs than the baseline's,
against the same knobs without it: ``references``). Each measurement goes into the run's
store with its verdict as it ends (``ledger``), so a killed Apply loses nothing and resumes at
the next measurement of the same plan.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from infrarsi.apply.decide import futile, pooled_sd, round_ratios
from infrarsi.apply.ledger import ApplyLedger
from infrarsi.apply.references import ReferenceRuns
from infrarsi.contract import Contract, ContractError, NoisePolicy
from infrarsi.events import (
    CandidateDropped,
    EventSink,
    MeasurementEnded,
    MeasurementLaunched,
    ignore,
)
from infrarsi.executors import Executor, TrialRequest
from infrarsi.identity import Configuration, config_key
from infrarsi.objective import compared_time
from infrarsi.records import CandidateResult, Measurement
from infrarsi.records.trial import TrialStatus
from infrarsi.trial import TrialRecord
from infrarsi.trial.spec import challenge_seed
from infrarsi.verify import verify
from infrarsi.verify.clock import compared_step_s, start_reasons, timing_of, timing_reference
from infrarsi.verify.evidence import challenge_unseen
from infrarsi.verify.reference import References
from infrarsi.workloads import Manifest

BASELINE = "baseline"


def plan(labels: list[str], rounds: int) -> list[tuple[int, str]]:
    """The order of measurements: each round the baseline then every candidate; a closing
    baseline (round ``rounds``) so that every candidate has a baseline on both sides."""
    order = [(r, label) for r in range(rounds) for label in [BASELINE, *labels]]
    return order + [(rounds, BASELINE)]


class Rounds:
    """Runs a plan through an executor, verifying each candidate against its round's baseline."""

    def __init__(
        self,
        contract: Contract,
        ledger: ApplyLedger,
        executor: Executor,
        candidates: list[CandidateResult],
        baseline_knobs: dict[str, Any],
        on_event: EventSink | None = None,
    ):
        """``ledger``: where each measurement goes as it ends, with its verdict, and where a
        resumed Apply finds what a killed one finished (the run's store)."""
        self.contract, self.ledger, self.executor = contract, ledger, executor
        self.configs: dict[str, tuple[dict[str, Any], list[str]]] = {BASELINE: (baseline_knobs, [])}
        self.configs.update({c.label: (c.knobs, c.patches) for c in candidates})
        self.on_event: EventSink = on_event or ignore
        self.baselines: dict[int, TrialRecord] = {}
        manifest = _manifest(contract)
        self.steps = timed_steps(contract, candidates)
        self.references = ReferenceRuns(
            contract, manifest, baseline_knobs, executor, ledger, self.steps
        )
        # a challenge seed per round: set through the workload's seed parameters, or the
        # bootstrap's offset of the seeds its script sets
        self.challenge = manifest is not None
        self.seeds: dict[int, int] = {}

    def run(self, rounds: int, confidence: float | None = None) -> list[Measurement]:
        """Every measurement of the plan, the ones a killed Apply already made included. With
        ``confidence``, a candidate that failed a check or whose interval lies wholly below 1
        after a round (``decide.futile``) is dropped from the rounds left, and the rounds end
        when no candidate is left (its closing baseline measured)."""
        labels = [label for label in self.configs if label != BASELINE]
        done = self._done(plan(labels, rounds))
        self.dropped: dict[str, int] = {}
        out: list[Measurement] = []
        index = 0
        for r in range(rounds + 1):
            if r and confidence is not None:
                self._drop_futile(out, r, rounds, confidence)
            active = [label for label in labels if label not in self.dropped]
            todo = [BASELINE] + (active if r < rounds else [])
            total = index + (rounds - r) * (len(active) + 1) + 1 if active else index + 1
            for label in todo:
                out.append(self._one(done, r, label, index, total))
                index += 1
            if not active:
                break
        return self._challenge_seen(out)

    def _challenge_seen(self, out: list[Measurement]) -> list[Measurement]:
        """The measurements, each candidate's saying so where the rounds' baselines show the
        challenge seeds changed nothing (``challenge_unseen``)."""
        unseen = challenge_unseen([self.baselines[r] for r in sorted(self.baselines)])
        if unseen is None:
            return out
        return [
            m
            if m.label == BASELINE
            else m.model_copy(update={"not_checked": [*m.not_checked, unseen]})
            for m in out
        ]

    def _one(
        self, done: dict[tuple[int, str], Measurement], r: int, label: str, index: int, total: int
    ) -> Measurement:
        """One measurement: the one a killed Apply already made, or a new one. ``total`` is
        how many measurements the plan holds now (it shrinks as candidates are dropped)."""
        if (r, label) in done:
            return done[(r, label)]
        self.on_event(MeasurementLaunched(index=index, total=total, round=r, label=label))
        measurement, verdict, record = self._measure(r, label)
        self.ledger.add(record, f"{label} round {r}", verdict)
        self.on_event(MeasurementEnded(index=index, total=total, measurement=measurement))
        return measurement

    def _drop_futile(self, out: list[Measurement], r: int, rounds: int, confidence: float) -> None:
        """Before round ``r``: drop each candidate that failed a check, or whose log ratios
        over the rounds so far say it cannot reach 1 (``decide.futile``, one look per round,
        the rounds' spread pooled over the candidates still measured)."""
        base: list[float | None] = [None] * (rounds + 1)
        for m in out:
            if m.label == BASELINE:
                base[m.round] = m.compared_s if m.status == TrialStatus.OK else None
        ratios = {}
        for label in self.configs:
            if label == BASELINE or label in self.dropped:
                continue
            mine = [m for m in out if m.label == label]
            if any(m.valid is False for m in mine):
                self.dropped[label] = r
                self.on_event(CandidateDropped(round=r, label=label, why="a check failed"))
                continue
            times: list[float | None] = [None] * rounds
            for m in mine:
                times[m.round] = m.compared_s
            ratios[label] = round_ratios(base[: r + 1], times[:r])
        pooled = pooled_sd(list(ratios.values()))
        for label, logs in ratios.items():
            if futile(logs, confidence, rounds, pooled):
                self.dropped[label] = r
                self.on_event(
                    CandidateDropped(
                        round=r, label=label, why="its interval lies below 1", ratios=list(logs)
                    )
                )

    def _done(self, order: list[tuple[int, str]]) -> dict[tuple[int, str], Measurement]:
        """Measurements of this plan a previous Apply of the run finished (same configs)."""
        found = {}
        for verdict, record in self.ledger.entries():
            m = Measurement.of_verdict(verdict)
            if m is None:  # a reference run (``references``)
                continue
            if (
                m.label in self.configs
                and _same_config(verdict.get("config"), self.configs[m.label])
                and (m.round, m.label) in order
            ):
                found[(m.round, m.label)] = m
                if m.seed is not None:
                    self.seeds.setdefault(m.round, m.seed)
                if m.label == BASELINE and record is not None and record.status.is_ok():
                    self.baselines[m.round] = record
        return found

    def _measure(self, r: int, label: str) -> tuple[Measurement, dict[str, Any], TrialRecord]:
        knobs, patches = self.configs[label]
        request = TrialRequest.of(
            self.contract,
            Configuration.of(knobs, patches),
            workdir="apply-trials",
            seed=self.seed(r),
            steps=self.steps,
        )
        record = self.executor.wait(self.executor.submit(request))
        measurement = self._judge(r, label, record)
        verdict = {
            "config": [knobs, list(patches)],
            "measurement": measurement.model_dump(mode="json"),
        }
        return measurement, verdict, record

    def _judge(self, r: int, label: str, record: TrialRecord) -> Measurement:
        m = record.metrics
        base = dict(
            round=r,
            seed=record.seed,
            label=label,
            trial_id=record.trial_id,
            trial_dir=record.trial_dir,
            status=record.status,
            compared_s=compared_time(record, self.contract.objective),
            step_time_s=m.harness_step_time_s or m.step_time_s if m else None,
            e2e_time_s=m.e2e_time_s if m else None,
            tokens_per_s=m.tokens_per_s if m else None,
            peak_mem_bytes=m.max_peak_mem_bytes if m else None,
            cost_s=record.cost_s,
        )
        if label == BASELINE:
            self.references.offer(record, [])
            if record.status.is_ok():
                self.baselines[r] = record
            reasons = (
                []
                if record.status is TrialStatus.OK
                else [f"ended {record.status.value}: {record.error}"]
            )
            return Measurement(**base, reasons=reasons)
        reference = self._baseline_near(r)
        if reference is None:
            return Measurement(
                **base, valid=False, reasons=["no baseline of this round ran ok to verify against"]
            )
        knobs, patches = self.configs[label]
        self.references.offer(record, list(patches))
        refs = (
            self.references.of(label, knobs, list(patches), record.seed)
            if record.status is TrialStatus.OK
            else None
        )
        clocked = bool(patches) and self.contract.objective != "e2e_time"
        if clocked and refs is not None:
            refs = self._start_again(reference, record, refs)
        verdict = verify(self.contract, reference, record, refs)
        if clocked:  # by the harness's clock alone
            timed_by = timing_reference(reference, record, refs or References())
            base.update(
                compared_s=harness_time(record, timed_by, self.contract.noise),
                timed_against=timed_by.trial_id if timed_by else None,
            )
        return Measurement(
            **base,
            valid=verdict.valid,
            reasons=verdict.reasons,
            flags=verdict.flags,
            not_checked=verdict.not_checked,
            ran=verdict.ran,
        )

    def _start_again(
        self, reference: TrialRecord, record: TrialRecord, refs: References
    ) -> References:
        """``refs``, with the run the patch is timed against measured once more where the
        candidate's start line would be refused against that one run: one slow (or quick)
        start-up of the reference does not decide; a start line that still stands apart
        from both is refused (``clock.start_reasons``)."""
        timed_by = timing_reference(reference, record, refs)
        timing = timing_of(self.contract.noise, [timed_by]) if timed_by else None
        if timed_by is None or timing is None or record.metrics is None:
            return refs
        if not start_reasons(record.metrics, timing):
            return refs
        return replace(refs, start_again=self.references.again(timed_by))

    def seed(self, r: int) -> int | None:
        """Round ``r``'s challenge seed: drawn when the round starts, never written where a
        trial could read it before it runs (None: the contract's workload cannot be loaded)."""
        if not self.challenge:
            return None
        if r not in self.seeds:
            self.seeds[r] = challenge_seed()
        return self.seeds[r]

    def _baseline_near(self, r: int) -> TrialRecord | None:
        """The baseline a round's candidate is verified against: its round's (the same
        challenge seed), or, without seeds, the nearest round's that ran ok."""
        if self.challenge:
            return self.baselines.get(r)
        for k in sorted(self.baselines, key=lambda k: (abs(k - r), k)):
            return self.baselines[k]
        return None


def timed_steps(contract: Contract, candidates: list[CandidateResult]) -> int | None:
    """The steps Apply's rounds run: under a throughput objective with a patched candidate, the
    Doctor's ``timed_steps`` (a patch is timed by launch to exit, whose start-up noise more
    steps dilute); otherwise the contract's own (None)."""
    if contract.objective == "e2e_time" or not any(c.patches for c in candidates):
        return None
    steps = contract.noise.timed_steps
    return steps if steps and steps != contract.invariants.steps else None


def harness_time(
    record: TrialRecord, timed_by: TrialRecord | None, noise: NoisePolicy | None = None
) -> float | None:
    """A patched candidate's steady step as Apply compares it: its step charged by the
    harness's clock against the same knobs without the patch, run in its round, or its lines'
    own steady step where that is longer — the clock bounds what the lines can claim, and the
    lines bound what a one-time saving inside the clock's window (a faster set-up) can be
    credited as (``clock.compared_step_s``). None when that run or the candidate has no
    timing, or when the charge is impossible (the window did not contain the run: a refusal,
    never handed to the lines)."""
    return compared_step_s(record, timed_by, noise or NoisePolicy())


def _manifest(contract: Contract) -> Manifest | None:
    try:
        return contract.manifest()
    except ContractError:  # its references cannot be derived: verify says what was not run
        return None


def _same_config(saved: object, config: tuple[dict[str, Any], list[str]]) -> bool:
    """Whether a stored verdict's ``[knobs, patches]`` is this config (``config_key``'s rule)."""
    if not isinstance(saved, list | tuple) or len(saved) != 2:
        return False
    knobs, patches = saved
    return isinstance(knobs, dict) and config_key(knobs, patches) == config_key(*config)
