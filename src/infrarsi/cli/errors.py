"""How the command line ends on an error: bad input (an ``InfraRSIError``) is one ``error:``
line and exit 2; anything else is a bug in InfraRSI, shown with its traceback and exit 3."""

from __future__ import annotations

import traceback
from typing import NoReturn

import typer
from rich.console import Console

from infrarsi.errors import InfraRSIError

USER_ERROR_EXIT = 2  # bad input: the message names the field and the fix
BUG_EXIT = 3  # an exception InfraRSI did not expect: a bug, reported as one


def user_error(err: Console, message: str | InfraRSIError) -> NoReturn:
    """Print one error line (or a few) to stderr and exit 2."""
    err.print("[bold red]error:[/] ", end="")
    err.print(str(message), markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(USER_ERROR_EXIT)


def report_bug(err: Console, exc: BaseException) -> NoReturn:
    """Print the traceback of an unexpected exception, say it is a bug, and exit 3."""
    err.print("".join(traceback.format_exception(exc)), markup=False, highlight=False, end="")
    err.print(
        f"[bold red]internal error:[/] {type(exc).__name__} is a bug in InfraRSI, not a problem "
        "with your input; please report it with the traceback above",
        highlight=False,
    )
    raise SystemExit(BUG_EXIT)
