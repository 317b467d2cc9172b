"""The one error type the library raises for bad input or bad usage."""
from __future__ import annotations


class AuditError(Exception):
    """Base class: the CLI turns it into a one-line message and exit code 2."""


class InputError(AuditError):
    """A whole input cannot be read; names the file and what was expected."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


class NotACapture(InputError):
    """The input is JSON but holds no capture (a client's or a server's own log beside the captures): met while
    walking a directory it is skipped with this reason, named on the command line it is an error."""


class StoreError(AuditError):
    """The Parquet store cannot be read or written (locked, damaged, disk full); names what to do."""
