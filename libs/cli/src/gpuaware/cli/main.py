"""The `gpuaware` command: one entry point for the embedded stack, the demo and the evaluators.

Sub-commands live in their own modules (`stack`, `demo`, `drill`, `evaluate`, `health`, `forecast`, `quota`); this file only assembles them.

It also holds the one error policy every command shares (see options.py for the refusals): an error
the command did not turn into a refusal itself is caught here, on the root group, and printed as one
line on standard error with exit status 1 (3 for an operating-system error: a file or a service out of
reach); the traceback is printed only with ``gpuaware --debug ...`` (or GPUAWARE_DEBUG=1). Usage
errors stay click's (exit 2), and ``typer.Exit`` keeps the status the command chose.
"""

from __future__ import annotations

import sys
import traceback
from typing import Annotated, Any

import typer
from rich.markup import escape
from typer.core import TyperGroup

from gpuaware.cli import alerts, demo, drill, evaluate, forecast, health, quota, stack
from gpuaware.cli.options import errors

PASSED_THROUGH = (typer.Exit, typer.Abort, typer.TyperException, BrokenPipeError)
"""what a command raises on purpose: its exit status, an abort, a usage error (click prints them); and
a reader that went away (``gpuaware ... | head``), which click ends quietly"""


def describe(exc: BaseException) -> tuple[str, int]:
    """One line saying what went wrong, and the exit status for it."""
    if isinstance(exc, MemoryError):
        return "out of memory: the input needs more memory than this process may use", 1
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        return f"{where}{exc.strerror or exc or type(exc).__name__}", 3
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}{': ' + text[:500] if text else ''}", 1


class GuardedGroup(TyperGroup):
    """The root group: any unexpected error of a sub-command becomes one line and an exit status."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except PASSED_THROUGH:
            raise
        except Exception as exc:
            message, code = describe(exc)
            if ctx.params.get("debug"):
                traceback.print_exc(file=sys.stderr)
            errors.print(f"[red]error:[/red] {escape(message)}"
                         + ("" if ctx.params.get("debug") else " [dim](gpuaware --debug shows the traceback)[/dim]"),
                         soft_wrap=True, highlight=False)
            raise typer.Exit(code) from None


app = typer.Typer(
    name="gpuaware",
    help="GPU-aware scheduling for Kubernetes: embedded stack, demo and evaluators.\n\n"
         "Errors go to standard error. Exit status 2: input refused; 3: a service or file out of reach; "
         "1: the work failed.",
    cls=GuardedGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", envvar="GPUAWARE_DEBUG",
                                        help="On an unexpected error, print its traceback too.")] = False,
) -> None:
    """The root's own option (``--debug``); main.py's handler reads it from the context."""


app.command("up")(stack.up)
app.command("down")(stack.down)
app.command("status")(stack.status)
app.command("demo")(demo.demo)
app.command("drill")(drill.drill)
app.add_typer(evaluate.app, name="eval")
app.add_typer(health.app, name="health")
app.add_typer(forecast.app, name="forecast")
app.add_typer(quota.app, name="quota")
app.add_typer(alerts.app, name="alerts")

if __name__ == "__main__":  # pragma: no cover
    app()
