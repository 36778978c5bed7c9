"""No secret in any line or file: a URL's password is shown as ``***`` and the real URL is
only what the process connects with (``infrarsi.redact``)."""

import json

from conftest import run_cli

from infrarsi.redact import is_masked, masked_url, scrub, unmasked


def test_a_password_in_a_url_is_masked_and_the_real_url_remembered(monkeypatch):
    url = "postgresql+psycopg://ana:s3cr%40t@db.example:5432/bank?sslmode=require"
    shown = masked_url(url)
    assert shown == "postgresql+psycopg://ana:***@db.example:5432/bank?sslmode=require"
    assert is_masked(shown) and unmasked(shown) == url
    assert masked_url("sqlite:////tmp/bank.sqlite") == "sqlite:////tmp/bank.sqlite"
    assert masked_url("http://host/v1?api_key=abc&x=1") == "http://host/v1?api_key=***&x=1"
    other = "postgresql://bo:***@elsewhere/db"
    assert unmasked(other) is None  # never seen here, and not given
    monkeypatch.setenv("INFRARSI_STORE_URL", "postgresql://bo:pw@elsewhere/db")
    assert unmasked(other) == "postgresql://bo:pw@elsewhere/db"
    said = scrub("cannot open postgresql://bo:pw@elsewhere/db: refused")
    assert "pw" not in said and "bo:***@elsewhere" in said


def test_a_bank_password_is_in_no_line_and_no_file_of_a_run(tmp_path):
    """The bank's URL carries a password (its server unreachable: the answer names it); and a
    run store URL with one is written masked in the run's files."""
    secret = "hunter2-not-shown"
    url = f"postgresql+psycopg://infra:{secret}@127.0.0.1:9/bank"
    result = run_cli(
        "optimize", "dense-1node", "cut time", "--yes", "--budget", "1", "--bank", url,
        "--out", "o", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-1500:]
    assert secret not in result.stdout + result.stderr
    assert "infra:***@127.0.0.1" in result.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    listed = run_cli("bank", "list", "--bank", url, "--json", cwd=tmp_path)
    assert secret not in listed.stdout + listed.stderr
    assert json.dumps(url) not in listed.stdout
