"""Shared fixtures: the bundled and toy workloads, a trial folder, and the real CLI."""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import seeded_bank
from postgres import bank_url, new_database, postgres_server, postgres_url, store_url  # noqa: F401 - one server per session for the store's and the bank's suites

from infrarsi.sandbox.process import trial_processes
from infrarsi.workloads import find, load_manifest

FIXTURES = Path(__file__).parent / "fixtures"
INSTRUCTION_EN = (
    "Cut end-to-end time; keep loss within 0.5% and memory under 2 GiB per rank; "
    "don't touch the data pipeline; 20 trials"
)
INSTRUCTION_ZH = (
    "缩短端到端时间；loss 偏差不超过 0.5%，每卡显存不超过 2 GiB；不要修改数据管道；20 次试验"
)
INSTRUCTION_JA = (
    "エンドツーエンドの時間を短縮し、損失の差は0.5%以内、メモリは1ランクあたり2 GiB以内、"
    "データパイプラインには触らないで、試行は20回まで"
)


@pytest.fixture(scope="session", autouse=True)
def session_bank(tmp_path_factory):
    """A bank for what runs before any test's own (module and session fixtures): never the
    user's ~/.infrarsi/bank.sqlite."""
    before = os.environ.get("INFRARSI_BANK")
    os.environ["INFRARSI_BANK"] = str(tmp_path_factory.mktemp("session-bank") / "bank.sqlite")
    yield
    if before is None:
        os.environ.pop("INFRARSI_BANK", None)
    else:
        os.environ["INFRARSI_BANK"] = before


@pytest.fixture(autouse=True)
def own_bank(tmp_path_factory, monkeypatch):
    """Every test its own empty experience bank (never the user's ~/.infrarsi/bank.sqlite);
    the CLI processes a test starts inherit it."""
    path = tmp_path_factory.mktemp("bank") / "bank.sqlite"
    monkeypatch.setenv("INFRARSI_BANK", str(path))
    return path


OWNED_BY = {
    "root": "pid namespace; network namespace of its own",
    "user": "pid namespace in a user namespace; network namespace of its own",
    "subreaper": "subreaper (no namespace: no namespace asked for); host network",
}


@pytest.fixture
def owned_by(request, monkeypatch):
    """The way the harness owns a trial's processes (parametrised indirectly: ``root``,
    ``user``, ``subreaper``), the stronger ones set aside through ``INFRARSI_OWNERSHIP``; the
    ownership line a trial's record then carries."""
    from infrarsi.sandbox import ownership

    way = request.param
    if way == "root" and os.geteuid() != 0:
        pytest.skip("namespaces made by the harness itself need root")
    if way == "user" and not ownership._user_namespaces_allowed():
        pytest.skip("this kernel gives this user no user namespace")
    if way != "root":
        monkeypatch.setenv(ownership.MODE_ENV, way)
    return OWNED_BY[way]


@pytest.fixture(scope="session")
def dense():
    """The dense-1node reference workload."""
    return find("dense-1node")


@pytest.fixture(scope="session")
def toy():
    """A toy workload that can train, hang, crash or allocate on request."""
    return load_manifest(FIXTURES / "toy")


DOCTORED_INSTRUCTION = "Cut end-to-end time; keep loss within 0.5% and memory under 2 GiB per rank"


@dataclass(frozen=True)
class Doctored:
    """What ``infrarsi init`` then ``infrarsi doctor --json`` left: the contract as Init wrote
    it (``before``), the contract the Doctor sealed in its place, and the Doctor's report."""

    before: Path
    contract: Path
    report: dict


@pytest.fixture(scope="session")
def doctored(tmp_path_factory):
    """A bundled workload's ``infrarsi init`` and ``infrarsi doctor --repeats 2 --json`` at
    tiny, run once per session and shared by the tests that read the report
    (``tests/doctor/test_doctor.py``) or judge under its contracts
    (``tests/test_adversarial.py``): ``get(name)`` returns a ``Doctored``. One-node workloads
    are calibrated; the two-node ones skip the calibration trials (the same code, which the
    one-node workloads cover: three more two-node trials each cost ~40 s on two cores)."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = _doctor(name, tmp_path_factory.mktemp(f"doctored-{name}"))
        return cache[name]

    return get


def _doctor(name: str, folder: Path) -> Doctored:
    contract = folder / "c.yaml"
    init = run_cli("init", name, DOCTORED_INSTRUCTION, "-o", str(contract), "--yes")
    assert init.returncode == 0, init.stderr
    before = folder / "c.before.yaml"
    shutil.copyfile(contract, before)
    calibrate = find(name).launch.nodes == 1
    options = [] if calibrate else ["--no-calibrate"]
    report = doctor_json(str(contract), str(folder / "t"), *options, cwd=folder)
    return Doctored(before, contract, report)


@pytest.fixture(scope="session")
def tiny_baseline(tmp_path_factory):
    """A bundled workload's baseline trial at tiny (its knob defaults, no patch, no cap), run
    once per session and shared by the tests that compare against it or cap it: ``get(name)``
    returns its record."""
    from infrarsi.trial import prepare, run_trial

    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = run_trial(prepare(find(name), "tiny"), tmp_path_factory.mktemp(name))
        return cache[name]

    return get


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 600, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run ``python -m infrarsi ARGS`` as a real process (``env``: set beside this one's)."""
    return subprocess.run(
        [sys.executable, "-m", "infrarsi", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env={**os.environ, **env} if env else None,
    )


def cli_json(*args: str, cwd: Path | None = None) -> dict:
    """Run the CLI with ``--json`` and parse its standard output."""
    result = run_cli(*args, "--json", cwd=cwd)
    assert result.stdout.strip(), f"no output; stderr:\n{result.stderr}"
    return json.loads(result.stdout)


def doctor_json(contract: str, workdir: str, *options: str, cwd: Path | None = None) -> dict:
    """Run ``infrarsi doctor CONTRACT --repeats 2 --workdir WORKDIR --json OPTIONS`` (the
    command must succeed); its report, parsed."""
    result = run_cli(
        "doctor", contract, "--repeats", "2", "--workdir", workdir, "--json", *options, cwd=cwd
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_no_leftovers(trial_id: str) -> None:
    """No process of the trial is still alive."""
    assert trial_processes(trial_id) == [], f"processes of {trial_id} survived"


def optimize_json(
    manifest: Path, instruction: str, out: Path, *options: str, counted: Path | None = None
) -> dict:
    """Run ``infrarsi optimize MANIFEST INSTRUCTION --scale tiny --yes --json`` as a real
    process in ``out``; its stdout, which is the one JSON answer and nothing else, parsed (the
    command must succeed). What it printed is kept as ``out/optimize.stdout`` and
    ``out/optimize.stderr`` (its screen). ``counted``: a file each run store the process opens
    is written to (``counted_stores.py``)."""
    python = [sys.executable, "-m", "infrarsi"]
    env = None
    if counted is not None:
        python = [sys.executable, str(Path(__file__).parent / "counted_stores.py")]
        env = {**os.environ, "INFRARSI_TEST_COUNTED_STORES": str(counted)}
    result = subprocess.run(
        [
            *python,
            "optimize",
            str(manifest),
            instruction,
            "--scale",
            "tiny",
            *options,
            "--yes",
            "--json",
            "--out",
            str(out / "rounds"),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=out,
        env=env,
    )
    (out / "optimize.stdout").write_text(result.stdout)
    (out / "optimize.stderr").write_text(result.stderr)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout)


OPTIMIZE_INSTRUCTION = "cut time-to-train, loss within 1%"
OPTIMIZE_ROUNDS = 2  # Apply's rounds: what the tests read of them needs no more


@dataclass(frozen=True)
class Optimized:
    """The session's shared optimize: its JSON answer, its folder (its screen kept there) and
    the bank it started from (``seeded_bank.py``)."""

    answer: dict
    out: Path
    bank: "seeded_bank.SeededBank"


@pytest.fixture(scope="session")
def dense_optimized(tmp_path_factory, request) -> Optimized:
    """One ``infrarsi optimize`` of dense-1node at tiny, shared by the tests that read what it
    wrote (its run directory, its audit, its report, its Doctor, what it made of its bank):
    each such run costs a couple of minutes on two cores. Its bank starts with an earlier
    round of the job and an earlier run's 4x claim (``seeded_bank.py``), on the session's
    PostgreSQL server with a password in its URL where there is one (CI), else a SQLite file."""
    out = tmp_path_factory.mktemp("optimize")
    try:
        server = request.getfixturevalue("postgres_server")
    except pytest.skip.Exception:  # no server here (never in CI, which requires one)
        seeded = seeded_bank.seed(f"sqlite:///{out / 'bank.sqlite'}")
    else:
        url = new_database(server).replace("://infrarsi@", f"://infrarsi:{seeded_bank.SECRET}@")
        seeded = seeded_bank.seed(url, seeded_bank.SECRET)
    answer = optimize_json(
        Path("dense-1node"),
        OPTIMIZE_INSTRUCTION,
        out,
        "--budget",
        "3",
        "--top",
        "1",
        "--verify-rounds",
        str(OPTIMIZE_ROUNDS),
        "--doctor-repeats",
        "2",
        "--bank",
        seeded.url,
        counted=out / "stores-opened.txt",
    )
    return Optimized(answer, out, seeded)
