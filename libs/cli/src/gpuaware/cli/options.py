"""Numeric command-line options that must be real, bounded numbers, and where errors are printed.

Why: click's ``FloatRange`` lets ``nan`` through (every comparison with NaN is false) and an open
upper bound lets ``inf`` through, so ``--inflation inf`` ran until memory ran out and ``--inflation
nan`` wrote bare ``NaN`` into a JSON file. ``bounded(lo, hi)`` is the one check every float option
uses: finite, and within ``[lo, hi]`` (``lo_open`` for a strictly positive option), refused with the
option's name and the range before any work starts. ``errors`` is the console for messages that are
not results: standard error, so a script reading standard output never parses an error as data.
``refuse`` is the one way a command stops on input it cannot use: the reason on standard error, a
non-zero exit status, no traceback.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

__all__ = ["bounded", "errors", "refuse"]

errors = Console(stderr=True)
"""where ``bad input`` and other refusals go (standard error)"""


def refuse(message: object, *, label: str = "bad input", code: int = 2) -> NoReturn:
    """Print ``label: message`` on standard error and exit with ``code`` (2: bad input, 3: a service
    or file out of reach, 1: the work failed). The message is printed as text, never as markup."""
    errors.print(f"[red]{escape(label)}:[/red] {escape(str(message))}")
    raise typer.Exit(code)


def bounded(lo: float, hi: float, *, lo_open: bool = False) -> Callable[[typer.CallbackParam, float | None],
                                                                         float | None]:
    """A typer option callback: the value must be finite and within ``[lo, hi]`` (``(lo, hi]``)."""

    def check(param: typer.CallbackParam, value: float | None) -> float | None:
        if value is None:
            return value
        name = "/".join(param.opts) if param.opts else (param.name or "value")
        left = "(" if lo_open else "["
        if not math.isfinite(value) or value < lo or value > hi or (lo_open and value == lo):
            raise typer.BadParameter(f"{name} must be a finite number in {left}{lo:g}, {hi:g}], got {value!r}")
        return value

    return check
