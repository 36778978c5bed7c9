"""The LLM's roles for the arguments the rules cannot place: asked only when the batch or the
accumulation is missing, checked as the rules' guesses are (a known role, one argument per
role, the type the role needs), each one kept or dropped said in the notes (scripted answers;
the endpoint path is the one ``test_draft_llm.py`` tries against a real server)."""

import json

import pytest
from chat_server import ChatServer
from conftest import FIXTURES, run_cli

from infrarsi.draft.command import parse_command
from infrarsi.draft.draft import plan, read_script
from infrarsi.workloads import load_manifest

ODD_NAMES = """
import argparse
p = argparse.ArgumentParser()
p.add_argument("--n_seqs", type=int, default=4, help="sequences per forward pass")
p.add_argument("--k", type=int, default=2, help="micro-steps summed before each update")
p.add_argument("--lr", type=float, default=3e-4)
p.add_argument("--out_dir", type=str, default="out")
p.add_argument("--steps", type=int, default=50)
p.add_argument("--eval_batch", type=int, default=8)
args = p.parse_args()
"""


def answering(reply):
    asked = []

    def ask(system: str, user: str) -> str:
        asked.append(user)
        return reply if isinstance(reply, str) else json.dumps(reply)

    return ask, asked


def _plan(tmp_path, source: str, ask=None):
    (tmp_path / "train.py").write_text(source)
    command = parse_command(["python", "train.py", "--n_seqs", "4", "--k", "2"])
    return plan(read_script(command, tmp_path), cores=2, ask=ask)


def test_the_llm_places_a_batch_and_an_accumulation_the_rules_cannot_name(tmp_path):
    ask, asked = answering(
        {"roles": {"n_seqs": "micro_batch", "k": "grad_accum", "lr": None, "out_dir": None}}
    )
    draft = _plan(tmp_path, ODD_NAMES, ask)
    assert len(asked) == 1
    shown = asked[0]
    assert "n_seqs: type int, default 4" in shown and "sequences per forward pass" in shown
    assert "steps:" not in shown and "eval_batch" not in shown  # read otherwise / eval only
    knobs = {k["name"]: k for k in draft.knobs}
    assert knobs["grad_accum"]["derive"] == "8 // (micro_batch)"  # the global batch: 4 x 2
    assert "--n_seqs={micro_batch}" in draft.template and "--k={grad_accum}" in draft.template
    assert any("n_seqs: role micro_batch, guessed by the LLM" in n for n in draft.notes)


def test_what_the_llm_gets_wrong_is_dropped_with_the_reason(tmp_path):
    ask, _ = answering(
        {
            "roles": {
                "out_dir": "micro_batch",  # a string cannot be a batch size
                "n_seqs": "micro_batch",
                "k": "micro_batch",  # taken by n_seqs
                "lr": "learning_rate",  # no such role
                "batch": "grad_accum",  # no such argument
            }
        }
    )
    draft = _plan(tmp_path, ODD_NAMES, ask)
    notes = "\n".join(draft.notes)
    assert "out_dir was dropped: micro_batch needs an integer, not str" in notes
    assert "k was dropped: another argument took micro_batch" in notes
    assert "lr was dropped: 'learning_rate' is not a role" in notes
    assert "batch was dropped: the script declares no such argument" in notes
    assert "grad_accum" not in {k["name"] for k in draft.knobs}
    assert any("n_seqs: no accumulation argument" in n for n in draft.notes)  # kept as given


def test_the_rules_first_and_a_bad_reply_leaves_their_draft(tmp_path):
    plain = ODD_NAMES.replace("--n_seqs", "--batch_size").replace('"--k"', '"--grad_accum"')
    ask, asked = answering({"roles": {}})
    (tmp_path / "train.py").write_text(plain)
    command = parse_command(["python", "train.py", "--batch_size", "4", "--grad_accum", "2"])
    draft = plan(read_script(command, tmp_path), cores=2, ask=ask)
    assert not asked  # the rules placed both
    assert {"micro_batch", "grad_accum"} <= {k["name"] for k in draft.knobs}
    ask, asked = answering("the batch is n_seqs, I think")
    draft = _plan(tmp_path, ODD_NAMES, ask)
    assert len(asked) == 1 and "micro_batch" not in {k["name"] for k in draft.knobs}
    assert any("arguments' roles and not used" in n for n in draft.notes)


def test_without_an_endpoint_the_llm_is_not_asked(tmp_path, monkeypatch):
    monkeypatch.delenv("INFRARSI_LLM_BASE_URL", raising=False)
    draft = _plan(tmp_path, ODD_NAMES)
    assert {k["name"] for k in draft.knobs} == {"omp_num_threads"}
    assert not any("LLM" in n for n in draft.notes)


@pytest.mark.slow
def test_a_script_with_names_no_rule_knows_is_drafted_with_the_llms_roles(tmp_path):
    """``manifest draft`` of a real script whose batch and accumulation are ``--n-seqs`` and
    ``--k``, against a chat-completions server on loopback: the drafted manifest searches
    them as micro-batch and accumulation at a fixed global batch, and ``validate`` takes it
    with no hand edit."""
    source = (FIXTURES / "logging-lm" / "train.py").read_text()
    for old, new in (("batch-size", "n-seqs"), ("batch_size", "n_seqs"), ("grad-accum", "k")):
        source = source.replace(old, new)
    source = source.replace("grad_accum", "k")
    (tmp_path / "train.py").write_text(source)
    chat = ChatServer([json.dumps({"roles": {"n_seqs": "micro_batch", "k": "grad_accum"}})])
    try:
        drafted = run_cli(
            "manifest", "draft", "-o", "workload.yaml", "--yes", "--",
            "python", "train.py", "--n-seqs", "4", "--k", "2", "--num-steps", "6",
            cwd=tmp_path, env=chat.env,
        )  # fmt: skip
    finally:
        chat.close()
    assert drafted.returncode == 0, drafted.stderr[-2000:]
    assert "guessed by the LLM" in drafted.stdout + drafted.stderr
    manifest = load_manifest(tmp_path / "workload.yaml")
    roles = {k.name: k.role for k in manifest.knobs}
    assert roles["micro_batch"] == "micro_batch" and roles["grad_accum"] == "grad_accum"
    assert "--n-seqs={micro_batch}" in manifest.launch.command
    assert "--k={grad_accum}" in manifest.launch.command
    checked = run_cli("validate", "workload.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr[-2000:]
