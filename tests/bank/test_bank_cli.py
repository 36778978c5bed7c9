"""``infrarsi bank`` as a user meets it: real processes on a real bank file."""

import json

from conftest import cli_json, run_cli
from helpers import experience

from infrarsi.store.bank import BankStore


def _bank(path):
    bank = BankStore(str(path))
    bank.add(
        [
            experience("t1", {"micro_batch": 4}, 1.3, patches=["sdpa_attention"]),
            experience("t2", {"micro_batch": 8}, None, status="oom", censored=True),
            experience("t3", {"micro_batch": 2}, 1.0, run="run-2", stage="doctor"),
        ],
        {"ssdpa_attention": ("sdpa_attention", "--- a/x\n+++ b/x\n")},
    )
    return bank


def test_list_show_stats_export_import_and_forget(tmp_path):
    path = tmp_path / "bank.sqlite"
    _bank(path)
    listed = cli_json("bank", "list", "--bank", str(path))
    assert [r["status"] for r in listed["experiences"]] == ["ok", "oom", "ok"]
    assert listed["experiences"][0]["patches"] == ["sdpa_attention"]
    for row in listed["experiences"]:  # what the issue asks of every listed experience
        assert {"run_id", "workload", "hardware_id", "status", "speedup"} <= set(row)
    assert listed["experiences"][0]["hardware_id"] == "hostA"
    shown = cli_json("bank", "show", str(listed["experiences"][0]["id"]), "--bank", str(path))
    assert shown["knobs_json"] == {"micro_batch": 4} and shown["hardware_fp"] == "hostA"
    stats = cli_json("bank", "stats", "--bank", str(path))
    assert stats["experiences"] == 3 and stats["runs"] == 2 and stats["patch_texts"] == 1
    assert stats["by_stage"] == {"run": 2, "doctor": 1}
    assert (
        cli_json("bank", "export", str(tmp_path / "out.json"), "--bank", str(path))["experiences"]
        == 3
    )
    other = tmp_path / "other.sqlite"
    assert (
        cli_json("bank", "import", str(tmp_path / "out.json"), "--bank", str(other))["experiences"]
        == 3
    )
    assert cli_json("bank", "forget", "--run", "run-1", "--bank", str(other))["removed"] == 2
    assert cli_json("bank", "stats", "--bank", str(other))["runs"] == 1
    table = run_cli("bank", "list", "--bank", str(path))
    assert table.returncode == 0 and "1.300x" in table.stdout and "<=" not in table.stdout


def test_bad_input_exits_2_and_says_what_to_do(tmp_path):
    path = tmp_path / "bank.sqlite"
    _bank(path)
    missing = run_cli("bank", "show", "999", "--bank", str(path))
    assert missing.returncode == 2 and "no experience 999" in missing.stderr
    unknown = run_cli("bank", "forget", "--run", "no-such-run", "--bank", str(path))
    assert unknown.returncode == 2 and "run-1" in unknown.stderr
    (tmp_path / "junk.json").write_text(json.dumps({"hello": 1}))
    junk = run_cli("bank", "import", str(tmp_path / "junk.json"), "--bank", str(path))
    assert junk.returncode == 2 and "infrarsi bank export" in junk.stderr
    bad = run_cli("bank", "stats", "--bank", "nosuchdialect://x")
    assert bad.returncode == 2 and "--bank" in bad.stderr
