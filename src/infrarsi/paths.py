"""The files a user hands the tool and the folders it writes, answered in the project's words:
a folder given where a file is wanted, a binary file, a missing folder, a read-only one, a full
disk — each named with the path and the fix, never a traceback. Reading goes through
``read_text``; whatever the operating system refuses on the way is turned into an answer by
``os_answer`` at the command line's edge."""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path

from infrarsi.errors import InfraRSIError

# the exit codes: bad input the user can change (the message names it), and the machine's
# environment refusing (a full disk, a read-only folder) — neither is a bug
INPUT_EXIT = 2
ENVIRONMENT_EXIT = 4


class FileProblem(InfraRSIError):
    """A file or folder the tool cannot use as given; ``exit_code`` says whose fix it is."""

    def __init__(self, message: str, exit_code: int = INPUT_EXIT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def read_text(path: str | Path, what: str) -> str:
    """The text of the file at ``path`` (``what`` it should be: "contract", "patch"...);
    FileProblem naming the path when it is missing, a folder, unreadable or not text."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FileProblem(*os_answer(exc, what)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileProblem(
            f"{path}: not a text file (byte {exc.start} is not UTF-8 text): give the {what} "
            "as the YAML or text file the tool wrote or you wrote"
            if what != "patch"
            else f"{path}: not a text file (byte {exc.start} is not UTF-8 text): a patch is a "
            "unified diff (git diff's output)"
        ) from None


def os_answer(exc: OSError, what: str = "") -> tuple[str, int]:
    """(what to tell the user, the exit code) for an error the operating system raised on a
    path: the path, what is wrong with it and the fix."""
    path = exc.filename or "a file the tool writes"
    kind = f"the {what}" if what else "the file"
    answers: dict[int, tuple[str, int]] = {
        errno.ENOENT: (f"{path}: no such file or folder: check the path of {kind} (a folder "
                       "to write into must exist)", INPUT_EXIT),
        errno.EISDIR: (f"{path}: is a folder, not a file: give the path of {kind}, not a "
                       "folder's", INPUT_EXIT),
        errno.ENOTDIR: (f"{path}: a part of this path is a file, not a folder: choose another "
                        "path", INPUT_EXIT),
        errno.EACCES: (f"{path}: permission denied: choose a folder you can write (--out / -o) "
                       "or change its permissions", ENVIRONMENT_EXIT),
        errno.EPERM: (f"{path}: operation not permitted: choose a folder you can write "
                      "(--out / -o) or change its permissions", ENVIRONMENT_EXIT),
        errno.EROFS: (f"{path}: on a read-only file system: write elsewhere (--out / -o, or "
                      "HOME / INFRARSI_BANK for the bank)", ENVIRONMENT_EXIT),
        errno.ENOSPC: (f"{path}: no space left on the device: free some space or write "
                       "elsewhere (--out / -o); what was written before is kept", ENVIRONMENT_EXIT),
        errno.EDQUOT: (f"{path}: disk quota exceeded: free some space or write elsewhere",
                       ENVIRONMENT_EXIT),
        errno.ENAMETOOLONG: (f"{path}: the name is too long for the file system: choose a "
                             "shorter path", INPUT_EXIT),
    }  # fmt: skip
    message, code = answers.get(
        exc.errno or 0,
        (f"{path}: {exc.strerror or exc}: check the path and the disk", ENVIRONMENT_EXIT),
    )
    if code == ENVIRONMENT_EXIT and _under_home(exc.filename):
        message += (
            f"; the tool's own files are under HOME ({Path.home()}): give the bank with "
            "--bank PATH or leave it out with --no-bank, and the output with --out"
        )
    return message, code


def _under_home(name: object) -> bool:
    if not isinstance(name, str | Path):
        return False
    try:
        return Path(name).resolve().is_relative_to(Path.home().resolve())
    except (OSError, RuntimeError):
        return False


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of some bytes."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes (what a contract locks and a record names)."""
    return sha256_bytes(Path(path).read_bytes())
