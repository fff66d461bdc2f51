"""Errors that say what happens next: fix the migrations, or retry later.

Services must not import psycopg, so they cannot tell a dropped connection from a bad row by
exception type; `is_transient` makes that call here, once, for every caller.
"""

from __future__ import annotations

import psycopg
from psycopg_pool import PoolTimeout


class TsdbError(RuntimeError):
    """Base class for errors raised by gpuaware.tsdb itself."""


class MigrationError(TsdbError):
    """A migration cannot be applied; the message names the file. Permanent until someone fixes it."""

    def __init__(self, message: str, *, filename: str | None = None) -> None:
        super().__init__(message)
        self.filename = filename


class ChecksumMismatchError(MigrationError):
    """An already-applied migration file was edited. Never edit an applied migration: add a new one."""


# SQLSTATE classes that clear up on their own: connection loss (08), resources (53), operator
# intervention such as a restart (57), system errors (58), plus serialization/deadlock (40001/40P01).
_TRANSIENT_CLASSES = ("08", "53", "57", "58")
_TRANSIENT_STATES = {"40001", "40P01", "55P03"}


def is_transient(exc: BaseException) -> bool:
    """True when retrying the same operation later may succeed (server down, restarting, deadlock).

    False for errors that will fail again (bad data, missing table, permission): callers should
    dead-letter those instead of retrying forever.
    """
    if isinstance(exc, PoolTimeout):
        return True
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate
        if state is None:
            # no server answer at all: the connection failed or broke
            return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
        return state[:2] in _TRANSIENT_CLASSES or state in _TRANSIENT_STATES
    return isinstance(exc, ConnectionError | TimeoutError)


def is_data_error(exc: BaseException) -> bool:
    """True when the database refused the rows themselves (SQLSTATE class 22, a value it cannot hold such
    as a NUL character or a time out of range; 23, a constraint): the same rows fail again, and a writer
    of many rows should find the one at fault and set it aside. False for the deployment's errors
    (permission, missing table), which no row causes and an operator fixes, and for transient ones."""
    if isinstance(exc, psycopg.Error) and exc.sqlstate is not None:
        return exc.sqlstate[:2] in ("22", "23")
    return isinstance(exc, psycopg.DataError)


__all__ = ["ChecksumMismatchError", "MigrationError", "TsdbError", "is_data_error", "is_transient"]
