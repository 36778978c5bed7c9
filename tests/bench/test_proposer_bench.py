"""The patch agent's benchmark: its committed replies are what ``--write-replies`` composes,
and each one that must stop before the smoke trial stops at its stage."""

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import proposer  # noqa: E402

from infrarsi.executors import LocalExecutor  # noqa: E402
from infrarsi.init import make_contract, read_instruction  # noqa: E402
from infrarsi.init.build import workload_files  # noqa: E402
from infrarsi.proposers.reply import ReplyRejected, parse_reply  # noqa: E402
from infrarsi.proposers.validate import Validator  # noqa: E402
from infrarsi.workloads import find  # noqa: E402


@pytest.mark.parametrize("workload", proposer.WORKLOADS)
def test_the_committed_replies_stop_where_they_say(workload, tmp_path):
    committed = json.loads((proposer.REPLIES / f"replies-{workload}.json").read_text())
    assert committed == proposer.compose_replies(workload)
    assert {r["expect"] for r in committed} == {
        "accepted",
        "parse",
        "files",
        "apply",
        "compile",
        "smoke",
    }
    manifest = find(workload)
    contract = make_contract(
        manifest,
        "tiny",
        proposer.INSTRUCTION,
        read_instruction(proposer.INSTRUCTION, workload_files(manifest)),
    )
    validator = Validator(contract, tmp_path, LocalExecutor(tmp_path))
    for r in committed:
        try:
            checked = validator.check(parse_reply(r["reply"]).diff, smoke=False)
            got = "accepted" if checked.ok else checked.stage
        except ReplyRejected:
            got = "parse"
        expected = "accepted" if r["expect"] == "smoke" else r["expect"]  # no smoke trial here
        assert got == expected, (r["label"], got)
