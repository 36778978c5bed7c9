"""A real PostgreSQL server on loopback for the conformance suites of the store and the bank:
``initdb`` and ``pg_ctl`` (Debian's ``postgresql``) into a temporary folder, started once per
session and stopped after it. Where no server can be started the PostgreSQL cases skip with the
reason — except in CI (``CI=true`` or ``INFRARSI_REQUIRE_POSTGRES=1``), where they fail."""

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

REQUIRED = os.environ.get("CI") == "true" or os.environ.get("INFRARSI_REQUIRE_POSTGRES") == "1"


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _unavailable(reason: str):
    if REQUIRED:
        pytest.fail(f"PostgreSQL is required here (CI) but {reason}")
    pytest.skip(f"no PostgreSQL server for the bank's conformance suite: {reason}")


@pytest.fixture(scope="session")
def postgres_server():
    """``(host, port, user)`` of a PostgreSQL server started for this session."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if not initdb or not pg_ctl:
        _unavailable("initdb/pg_ctl not found (apt-get install postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("the psycopg driver is not installed (pip install 'psycopg[binary]')")
    # its own folder under /tmp: pytest's folders are private to their owner
    root = Path(tempfile.mkdtemp(prefix="infrarsi-postgres-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as its own user
        shutil.chown(root, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", _free_port()
    run = lambda *cmd: subprocess.run(
        [*as_user, *cmd],
        capture_output=True,
        text=True,  # noqa
        timeout=120,
    )
    made = run(initdb, "-D", str(data), "-U", "infrarsi", "--auth=trust", "-E", "UTF8")
    if made.returncode != 0:
        _unavailable(f"initdb failed: {made.stderr[-500:]}")
    started = run(
        pg_ctl,
        "-D",
        str(data),
        "-l",
        str(root / "log"),
        "-w",
        "-t",
        "60",
        "-o",
        f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off",
        "start",
    )
    if started.returncode != 0:
        _unavailable(f"pg_ctl start failed: {started.stderr[-500:]}")
    try:
        yield "127.0.0.1", port, "infrarsi"
    finally:
        run(pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def new_database(server: tuple[str, int, str]) -> str:
    """A fresh database on ``server`` (``postgres_server``), as a SQLAlchemy URL."""
    import psycopg

    host, port, user = server
    name = f"bank_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(
        host=host, port=port, user=user, dbname="postgres", autocommit=True
    ) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"postgresql+psycopg://{user}@{host}:{port}/{name}"


@pytest.fixture
def postgres_url(postgres_server):
    """A fresh database on the session's server, as a SQLAlchemy URL."""
    return new_database(postgres_server)


@pytest.fixture(params=["sqlite", "postgresql"])
def bank_url(request, tmp_path):
    """Each conformance test of the bank runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'bank.sqlite'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture(params=["sqlite", "memory", "postgresql"])
def store_url(request, tmp_path):
    """Each conformance test of the run store runs on a SQLite file, in memory (the fast
    tests' store) and on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'run.sqlite'}"
    if request.param == "memory":
        return "sqlite://"
    return request.getfixturevalue("postgres_url")
