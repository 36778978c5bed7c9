"""What the patch agent's validation saves: a fixed set of replies replayed against dense-1node
and moe-1node, each parsed and validated as a run would (``infrarsi.proposers``), and the
seconds that cost compared with running every proposal as a full trial of the search.

    .venv/bin/python bench/proposer.py                  # both workloads, the bench scale
    .venv/bin/python bench/proposer.py --write-replies  # rebuild bench/data/proposals/*.json

The replies (``bench/data/proposals/replies-<workload>.json``, committed) were composed by
``--write-replies`` in the form the prompt asks of an LLM — prose, one fenced diff, one fenced
expectation — from the workload's catalog patches (honest speed-ups), the adversarial suite's
cheats (``tests/fixtures/adversarial``) and the mistakes LLMs make (prose without a diff, two
diffs, a hunk whose context is not in the file, a syntax error, an edit of a locked file). No
endpoint was reachable where they were made: they stand in for recorded replies, and each
carries the stage it is expected to end at, so a change of the validation shows up here.

Per workload: replies accepted and rejected at each stage, the seconds validation spent
(parsing, the git checks, compiling, screening, the smoke trials at tiny with the smoke
baseline), the cost of one full trial at ``--scale`` (the baseline, measured here), and
``saved_s`` = every reply run as a full trial minus (validation + the accepted ones' full
trials). Writes ``bench/results/proposer.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from infrarsi.executors import LocalExecutor, TrialRequest
from infrarsi.init import make_contract, read_instruction
from infrarsi.init.build import workload_files
from infrarsi.proposal import ProposalStatus
from infrarsi.proposers.reply import ReplyRejected, parse_reply
from infrarsi.proposers.validate import Validator
from infrarsi.workloads import find

ROOT = Path(__file__).resolve().parent.parent
REPLIES = ROOT / "bench" / "data" / "proposals"
RESULTS = ROOT / "bench" / "results" / "proposer.json"
CHEATS = ROOT / "tests" / "fixtures" / "adversarial"
WORKLOADS = ("dense-1node", "moe-1node")
INSTRUCTION = "Cut end-to-end time; keep loss within 0.5%"
# cheats each workload's replies include, with the stage that must stop them
CHEAT_STAGES = {
    "dense-1node": {
        "edit_locked_data": "files",
        # the static screen flags these; what they do is refused by the smoke trial
        "patch_perf_counter": "smoke",
        "silent_bf16": "smoke",
        "scale_loss_down": "smoke",
        "drop_last_block": "smoke",
        "fewer_steps": "smoke",
    },
    "moe-1node": {
        "moe_top1_instead_of_top2": "smoke",
        "moe_bf16_gradient_allreduce": "smoke",
        "locked_via_dotdot": "files",
    },
}


def _reply(diff: str, ratio: float, what: str) -> str:
    expectation = json.dumps({"step_time_ratio": ratio, "peak_mem_ratio": 1.0, "addresses": what})
    return (
        f"The profile points at {what}. This patch should help.\n\n```diff\n{diff}```\n\n"
        f"```json\n{expectation}\n```\n"
    )


def compose_replies(workload: str) -> list[dict]:
    """The fixed replies of one workload, each with the stage it must end at."""
    manifest = find(workload)
    model = (manifest.root / "model.py").read_text().splitlines()
    i = next(k for k, line in enumerate(model) if line.startswith("import"))
    out = [
        {
            "label": f"catalog:{p.id}",
            "expect": "accepted",
            "reply": _reply(
                manifest.patch_path(p.id).read_text(), p.prior.step_time_ratio, p.title
            ),
        }
        for p in manifest.patches[:2]
    ]
    out += [
        {
            "label": f"cheat:{name}",
            "expect": stage,
            "reply": _reply((CHEATS / f"{name}.diff").read_text(), 0.7, "the slowest operator"),
        }
        for name, stage in CHEAT_STAGES[workload].items()
    ]
    one = manifest.patch_path(manifest.patches[0].id).read_text()
    out += [
        {
            "label": "prose only",
            "expect": "parse",
            "reply": "I would fuse the attention projections and use a fused optimizer.",
        },
        {
            "label": "two diffs",
            "expect": "parse",
            "reply": _reply(one, 0.9, "x")
            + "\nAlso:\n"
            + _reply(manifest.patch_path(manifest.patches[1].id).read_text(), 0.9, "y"),
        },
        {
            "label": "context not in the file",
            "expect": "apply",
            "reply": _reply(
                "--- a/model.py\n+++ b/model.py\n@@ -1,2 +1,2 @@\n-import numpy\n"
                "+import numpy as np\n import torch\n",
                0.95,
                "imports",
            ),
        },
        {
            "label": "syntax error",
            "expect": "compile",
            "reply": _reply(
                f"--- a/model.py\n+++ b/model.py\n@@ -{i + 1},2 +{i + 1},3 @@\n {model[i]}\n"
                f"+def fused(x:\n {model[i + 1]}\n",
                0.8,
                "the MLP",
            ),
        },
    ]
    return out


def replay(workload: str, scale: str, replies: list[dict], scratch: Path) -> dict:
    """Every reply parsed and validated as a run would; one full baseline trial for its cost."""
    manifest = find(workload)
    contract = make_contract(
        manifest, scale, INSTRUCTION, read_instruction(INSTRUCTION, workload_files(manifest))
    )
    executor = LocalExecutor(scratch)
    full = executor.run(
        TrialRequest(workload=workload, scale=scale, knobs={}, contract_hash=contract.contract_hash)
    )
    validator = Validator(contract, scratch, executor)
    details = []
    for r in replies:
        t0 = time.perf_counter()
        try:
            checked = validator.check(parse_reply(r["reply"]).diff)
            stage, ok, reason = checked.stage, checked.ok, checked.reason
        except ReplyRejected as exc:
            stage, ok, reason = "parse", False, str(exc)
        got = "accepted" if ok else stage
        details.append(
            {
                "label": r["label"],
                "expected": r["expect"],
                "got": got,
                "reason": reason[:300],
                "seconds": time.perf_counter() - t0,
            }
        )
        print(
            f"{workload}: {r['label']}: {got} ({details[-1]['seconds']:.1f} s) {reason[:90]}",
            file=sys.stderr,
            flush=True,
        )
    accepted = sum(d["got"] == ProposalStatus.ACCEPTED for d in details)
    validation_s = sum(d["seconds"] for d in details)
    return {
        "scale": scale,
        "replies": len(details),
        "accepted": accepted,
        "rejected": dict(Counter(d["got"] for d in details if d["got"] != ProposalStatus.ACCEPTED)),
        "as_expected": sum(d["got"] == d["expected"] for d in details),
        "validation_s": validation_s,
        "full_trial_s": full.cost_s,
        "full_trial_status": full.status.value,
        "all_as_full_trials_s": len(details) * full.cost_s,
        "with_validation_s": validation_s + accepted * full.cost_s,
        "saved_s": len(details) * full.cost_s - validation_s - accepted * full.cost_s,
        "details": details,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", action="append", choices=WORKLOADS)
    parser.add_argument("--scale", default="bench", help="the search's scale (full trials)")
    parser.add_argument("--write-replies", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    workloads = args.workload or list(WORKLOADS)
    if args.write_replies:
        REPLIES.mkdir(parents=True, exist_ok=True)
        for w in workloads:
            (REPLIES / f"replies-{w}.json").write_text(json.dumps(compose_replies(w), indent=1))
        print(f"wrote {REPLIES}", file=sys.stderr)
        return 0
    results = {}
    for w in workloads:
        path = REPLIES / f"replies-{w}.json"
        if not path.exists():
            print(f"{path} is missing: write it with --write-replies", file=sys.stderr)
            return 2
        scratch = Path(tempfile.mkdtemp(prefix="infrarsi-proposer-"))
        try:
            results[w] = replay(w, args.scale, json.loads(path.read_text()), scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        r = results[w]
        print(
            f"{w}: {r['accepted']} of {r['replies']} accepted, rejected {r['rejected']}; "
            f"validation {r['validation_s']:.0f} s vs {r['all_as_full_trials_s']:.0f} s as "
            f"full trials: {r['saved_s']:.0f} s saved; {r['as_expected']} as expected",
            file=sys.stderr,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"results": results}, indent=1))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
