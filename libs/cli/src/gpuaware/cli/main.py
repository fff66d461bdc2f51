"""The `gpuaware` command: one entry point for the embedded stack, the demo and the evaluators.

Sub-commands live in their own modules (`stack`, `demo`, `drill`, `evaluate`, `health`, `forecast`, `quota`); this file only assembles them.
"""

from __future__ import annotations

import typer

from gpuaware.cli import alerts, demo, drill, evaluate, forecast, health, quota, stack

app = typer.Typer(
    name="gpuaware",
    help="GPU-aware scheduling for Kubernetes: embedded stack, demo and evaluators.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
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
