"""The patch agent against a real HTTP server on loopback speaking the chat-completions
protocol with scripted replies (the ``openai`` client is not mocked)."""

import json
import socket

import pytest
from chat_server import ChatServer, broken_diff, catalog_diff, cheat_diff, fenced
from conftest import run_cli

from infrarsi.executors import LocalExecutor
from infrarsi.init import make_contract, read_instruction
from infrarsi.init.build import workload_files
from infrarsi.options import Budget, SearchOptions
from infrarsi.proposal import ProposalState, read_lines
from infrarsi.proposers import LLMBudget, LLMProposer, make_proposer
from infrarsi.proposers.llm import Endpoint
from infrarsi.stages import Stage
from infrarsi.workloads import find

INSTRUCTION = "Cut end-to-end time; keep loss within 0.5%"


@pytest.fixture()
def contract():
    manifest = find("dense-1node")
    return make_contract(
        manifest, "tiny", INSTRUCTION, read_instruction(INSTRUCTION, workload_files(manifest))
    )


@pytest.fixture()
def server():
    servers = []

    def start(replies, **options):
        servers.append(ChatServer(replies, **options))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _proposer(contract, tmp_path, env, notes=None, **budget):
    endpoint = Endpoint(
        env["INFRARSI_LLM_BASE_URL"], env["INFRARSI_LLM_MODEL"], retries=0, timeout_s=10
    )
    return LLMProposer(
        contract,
        tmp_path,
        LocalExecutor(tmp_path),
        endpoint,
        LLMBudget(**budget),
        with_catalog=False,
        on_note=(notes.append if notes is not None else None),
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rejections_are_recorded_and_told_in_the_next_prompt(contract, tmp_path, server):
    chat = server(
        [
            fenced("--- a/model.py\n+++ b/model.py\n+x = 1\n"),
            fenced(cheat_diff("edit_locked_data")),
            fenced(broken_diff()),
        ]
    )
    proposer = _proposer(contract, tmp_path, chat.env)
    assert proposer.propose(ProposalState(trials_done=0)) == []  # a round: 3 requests
    lines = read_lines(tmp_path)
    assert [(x.n, x.status, x.stage) for x in lines] == [
        (1, "rejected", "parse"),
        (2, "rejected", "files"),
        (3, "rejected", "compile"),
    ]
    assert all(
        x.tokens == 1200
        and x.seconds > 0
        and x.model == "scripted-model"
        and len(x.prompt_sha256) == 64
        for x in lines
    )
    assert lines[1].diff_sha256 is None and len(lines[2].diff_sha256) == 64
    first, second, third = (chat.prompt(i) for i in range(3))
    for text in (first, second, third):  # the contract, the knobs, the editable file's text
        assert "editable: model.py" in text and "micro_batch" in text
        assert "class CausalSelfAttention" in text or "## model.py" in text
        assert "sdpa_attention" in text  # the catalog, not to be rewritten
    assert "REJECTED" not in first
    assert "proposal 1: REJECTED at parse: the diff has no hunk" in second
    assert "proposal 2: REJECTED at files: data.py: locked file" in third
    assert "train.py" in first.split("locked:")[1].splitlines()[0]


def test_the_budget_caps_the_requests(contract, tmp_path, server):
    chat = server([], then="no patch today")
    proposer = _proposer(contract, tmp_path, chat.env, calls=2)
    proposer.propose(ProposalState(trials_done=0))
    proposer.propose(ProposalState(trials_done=2))
    assert len(chat.requests) == 2 and not proposer.wants_more()
    tokens = _proposer(contract, tmp_path / "t", chat.env, tokens=1000)
    (tmp_path / "t").mkdir()
    tokens.propose(ProposalState(trials_done=0))
    assert len(chat.requests) == 3  # the first reply's 1200 tokens spent the cap


def test_an_unreachable_endpoint_gives_one_note_and_the_catalog_back(contract, tmp_path):
    notes = []
    env = {
        "INFRARSI_LLM_BASE_URL": f"http://127.0.0.1:{_free_port()}/v1",
        "INFRARSI_LLM_MODEL": "m",
    }
    proposer = _proposer(contract, tmp_path, env, notes)
    assert not proposer.searches_catalog
    assert proposer.propose(ProposalState(trials_done=0)) == []
    assert proposer.propose(ProposalState(trials_done=2)) == []
    assert len(notes) == 1 and "cannot be reached" in notes[0] and "catalog" in notes[0]
    assert proposer.searches_catalog and not proposer.wants_more()
    assert read_lines(tmp_path) == []


def test_a_refused_key_gives_one_clear_note(contract, tmp_path, server):
    chat = server([], status=401)
    notes = []
    proposer = _proposer(contract, tmp_path, chat.env, notes)
    proposer.propose(ProposalState(trials_done=0))
    assert len(notes) == 1 and "refused the key" in notes[0] and "INFRARSI_LLM_API_KEY" in notes[0]
    assert proposer.searches_catalog


def test_an_llm_proposer_without_an_endpoint_names_the_variables(contract, tmp_path, monkeypatch):
    monkeypatch.delenv("INFRARSI_LLM_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="INFRARSI_LLM_BASE_URL"):
        make_proposer("llm", contract, tmp_path, LocalExecutor(tmp_path))
    with pytest.raises(ValueError, match="catalog, llm, both"):
        make_proposer("oracle", contract, tmp_path, LocalExecutor(tmp_path))
    result = run_cli(
        "optimize",
        "dense-1node",
        INSTRUCTION,
        "--proposer",
        "llm",
        "--yes",
        "--out",
        str(tmp_path / "o"),
    )
    assert result.returncode == 2 and "INFRARSI_LLM_MODEL" in result.stderr
    assert not (tmp_path / "o").exists()


def test_an_llm_endpoint_that_does_not_answer_ends_an_llm_only_run_before_any_trial(
    tmp_path, monkeypatch
):
    import time

    from infrarsi.proposers import check_kind

    url = f"http://127.0.0.1:{_free_port()}/v1"
    monkeypatch.setenv("INFRARSI_LLM_BASE_URL", url)
    monkeypatch.setenv("INFRARSI_LLM_MODEL", "m")
    assert check_kind("both") == "both"  # the catalog is there to fall back on
    t0 = time.monotonic()
    result = run_cli(
        "optimize", "dense-1node", INSTRUCTION, "--proposer", "llm", "--yes",
        "--out", str(tmp_path / "o"),
    )  # fmt: skip
    assert result.returncode == 2 and f"no LLM endpoint answers at {url}" in result.stderr
    assert "--proposer catalog" in result.stderr and time.monotonic() - t0 < 30
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_an_accepted_patch_is_smoke_tested_tried_audited_and_told_back(contract, tmp_path, server):
    from infrarsi.apply import apply_run
    from infrarsi.compose import audited, new_ledger
    from infrarsi.report import write_report
    from infrarsi.run.loop import start_run
    from infrarsi.run.setup import RunSetup
    from infrarsi.store import RunStatus, open_run_dir

    expectation = {
        "step_time_ratio": 0.8,
        "peak_mem_ratio": 0.9,
        "addresses": "the materialised causal mask",
    }
    chat = server(
        [
            fenced(cheat_diff("edit_locked_data")),  # round 1: a locked file
            fenced(catalog_diff("sdpa_attention"), expectation),  # accepted
            fenced(broken_diff()),  # round 2: does not compile
            fenced(cheat_diff("scale_loss_down")),  # changes the loss: smoke
            fenced(cheat_diff("patch_perf_counter")),
        ]
    )  # fakes the clock: flagged by the screen, refused by the smoke trial
    run_dir = tmp_path / "run"
    executor = LocalExecutor(run_dir)
    endpoint = Endpoint(chat.env["INFRARSI_LLM_BASE_URL"], "scripted-model", retries=0)
    proposer = LLMProposer(
        contract, run_dir, executor, endpoint, LLMBudget(calls=5), with_catalog=False
    )
    options = SearchOptions(budget=Budget(trials=4))
    ledger = audited(new_ledger(contract, run_dir, options, RunStatus.RUNNING), run_dir)
    setup = RunSetup.of(contract, run_dir, options, executor=executor, proposer=proposer)
    result = start_run(setup, ledger)
    lines = read_lines(run_dir)
    assert [(x.status, x.stage) for x in lines] == [
        ("rejected", "files"),
        ("accepted", "smoke"),
        ("rejected", "compile"),
        ("rejected", "smoke"),
        ("rejected", "smoke"),
    ], [x.reason for x in lines]
    assert "loss drift" in lines[3].reason and "a faked timer" in lines[4].reason
    assert "the screen flagged" in lines[4].reason and "clock" in lines[4].reason
    patch = lines[1].patch_id
    assert patch.startswith("proposals/llm-") and (run_dir / patch).is_file()
    assert lines[1].expectation.step_time_ratio == 0.8 and lines[1].smoke_speedup > 0
    store, run = open_run_dir(run_dir)
    trials = store.trials(run.run_id)
    assert len(trials) == result.trials == 4  # the smoke trials are not search trials
    smoke = store.trials(run.run_id, Stage.PROPOSE)  # ... but they are in the run's ledger
    assert [t.label for t in smoke] == ["smoke baseline"] + [
        f"smoke of diff {x.diff_sha256[:12]}" for x in lines if x.stage == "smoke"
    ]
    tried = [t for t in trials if patch in t.config_json["patches"]]
    assert tried and tried[0].seq == 1  # right after the baseline
    assert all(set(t.config_json["patches"]) <= {patch} for t in trials)  # no catalog, no reject
    second_round = chat.prompt(2)
    assert f"proposal 2: ACCEPTED as {patch}" in second_round
    assert "measured in 1 trial(s): speed-up" in second_round
    assert "proposal 1: REJECTED at files: data.py: locked file" in second_round
    assert "proposal 3: REJECTED at compile" in chat.prompt(3)

    apply_run(run_dir, top_k=1, rounds=1, ledger=ledger)
    audit = [json.loads(x) for x in (run_dir / "audit.jsonl").read_text().splitlines()]
    carrying = [
        r
        for r in audit
        if r["stage"] == "run" and any(p["id"] == patch.rsplit("/", 1)[1] for p in r["patches"])
    ]
    assert carrying and all(r["proposed_by"].startswith("llm:scripted-model") for r in carrying)
    assert [r["label"] for r in audit if r["stage"] == "propose"] == [t.label for t in smoke]
    assert all(
        r["proposed_by"] == "infrarsi" for r in audit if r["stage"] == "run" and r not in carrying
    )
    report = (run_dir / write_report(run_dir).markdown).read_text()
    assert "## Patches written by the LLM" in report and patch in report

    from infrarsi.bank import ingest_run
    from infrarsi.store.bank import BankStore

    bank = BankStore(str(tmp_path / "bank.sqlite"))
    ingest_run(run_dir, bank)
    kept = [p for e in bank.experiences() for p in e.patches_json if p["id"] == patch]
    assert kept and bank.patch_text(kept[0]["sha256"]) == (run_dir / patch).read_text()


def test_a_run_whose_llm_cannot_be_reached_searches_the_catalog(contract, tmp_path):
    from infrarsi.run.setup import Asking, RunSetup, ask_proposer, problem_of
    from infrarsi.store import Store, sqlite_url

    env = {
        "INFRARSI_LLM_BASE_URL": f"http://127.0.0.1:{_free_port()}/v1",
        "INFRARSI_LLM_MODEL": "m",
    }
    events = []
    setup = RunSetup.of(
        contract,
        tmp_path,
        SearchOptions(budget=Budget(trials=3)),
        proposer=_proposer(contract, tmp_path, env),
        on_event=events.append,
    )
    before = problem_of(setup)
    assert before.space.patches == []  # llm only: the catalog is left out
    store = Store(sqlite_url(tmp_path))
    changed = ask_proposer(setup, Asking({}), store, "no-run-yet", 0, before.baseline)
    assert changed and [type(e).__name__ for e in events] == ["PatchesAsked", "PatchesProposed"]
    assert set(problem_of(setup).space.patches) == {p.id for p in find("dense-1node").patches}
