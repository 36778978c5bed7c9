"""How the command line ends on an error: bad input (an ``InfraRSIError``) is one ``error:``
line and exit 2; the machine refusing (a full disk, a read-only folder: ``paths.os_answer``)
one line and exit 4; anything else is a bug in InfraRSI, shown with its traceback and exit 3."""

from __future__ import annotations

import traceback
from typing import NoReturn

import typer
from rich.console import Console

from infrarsi.errors import InfraRSIError
from infrarsi.paths import ENVIRONMENT_EXIT, FileProblem, os_answer

USER_ERROR_EXIT = 2  # bad input: the message names the field and the fix
BUG_EXIT = 3  # an exception InfraRSI did not expect: a bug, reported as one


def user_error(err: Console, message: str | InfraRSIError) -> NoReturn:
    """Print one error line (or a few) to stderr and exit 2 (a file problem: its own code)."""
    err.print("[bold red]error:[/] ", end="")
    err.print(str(message), markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(message.exit_code if isinstance(message, FileProblem) else USER_ERROR_EXIT)


def environment_error(err: Console, exc: BaseException) -> NoReturn | None:
    """An error of the machine's files the user can act on (a path that is not there, a
    read-only folder, a full disk, a store that cannot be written), told as such with its own
    exit code; returns for anything else."""
    if isinstance(exc, OSError) and exc.errno is not None:
        message, code = os_answer(exc)
        user_error(err, FileProblem(message, code))
    text = str(getattr(exc, "orig", "") or "")
    if type(exc).__name__ == "OperationalError" and text:  # a database's own refusal
        full = "full" in text or "disk" in text
        user_error(
            err,
            FileProblem(
                f"the store cannot be written: {text}: "
                + ("free some space or write elsewhere (--out)" if full else "check its path "
                   "and permissions (--out, --bank)"),
                ENVIRONMENT_EXIT,
            ),
        )  # fmt: skip
    return None


def report_bug(err: Console, exc: BaseException) -> NoReturn:
    """Print the traceback of an unexpected exception, say it is a bug, and exit 3."""
    err.print("".join(traceback.format_exception(exc)), markup=False, highlight=False, end="")
    err.print(
        f"[bold red]internal error:[/] {type(exc).__name__} is a bug in InfraRSI, not a problem "
        "with your input; please report it with the traceback above",
        highlight=False,
    )
    raise SystemExit(BUG_EXIT)
