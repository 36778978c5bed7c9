"""What a user can fix, told apart from what is a bug.

``InfraRSIError`` is bad input: a file, a name, a value or a setting the person running the tool
can change, with a message that names the field and the fix. The command line turns it, and only
it, into one ``error:`` line and exit code 2; any other exception is a bug in InfraRSI and is
reported as one. Every stage's own error class derives from it.
"""

from __future__ import annotations


class InfraRSIError(ValueError):
    """Bad input the user can fix; the message names the field and the fix."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownNameError(InfraRSIError, KeyError):
    """A name that is not there (a knob, a scale, a patch, a run, an experience), with the names
    that are. Still a ``KeyError`` for code that looks names up; shown without quotes."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
