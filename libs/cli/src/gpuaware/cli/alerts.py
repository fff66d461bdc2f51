"""``gpuaware alerts bridge``: run the alert-bridge service from command-line options.

The bridge is a service (``gpuaware.services.alert_bridge``, what the chart deploys); this command
only turns its options into the service's ``GPUAWARE_ALERT_BRIDGE_*`` settings and replaces itself
with ``python -m gpuaware.services.alert_bridge``, so there is one implementation. NATS comes from
``NATS_URL`` (``NATS_USER`` / ``NATS_PASSWORD`` when the server requires a user: ``alert-bridge``
is the least-privilege identity made for it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated

import typer

from gpuaware.cli.options import bounded
from gpuaware.cli.processes import service_built, service_command

__all__ = ["BRIDGE_MODULE", "app", "bridge_env"]

BRIDGE_MODULE = "gpuaware.services.alert_bridge"
PREFIX = "GPUAWARE_ALERT_BRIDGE_"

app = typer.Typer(help="Alerts: the bus <-> Alertmanager.", no_args_is_help=True)


def bridge_env(*, alertmanager: str, listen_port: int, listen_addr: str, cluster: str, resend_s: float,
               base: Mapping[str, str]) -> dict[str, str]:
    """The service's environment for these options, on top of ``base`` (the caller's environment)."""
    return {**base, f"{PREFIX}ALERTMANAGER_URL": alertmanager, f"{PREFIX}LISTEN_PORT": str(listen_port),
            f"{PREFIX}LISTEN_ADDR": listen_addr, f"{PREFIX}CLUSTER": cluster, f"{PREFIX}RESEND_S": f"{resend_s:g}",
            f"{PREFIX}LOG_FORMAT": base.get(f"{PREFIX}LOG_FORMAT", "console")}


@app.command()
def bridge(
    alertmanager: Annotated[str, typer.Option(help="Alertmanager's base URL, e.g. http://alertmanager:9093 "
                                              "(empty: nothing is forwarded).")] = "",
    listen_port: Annotated[int, typer.Option(min=0, max=65535, help="Serve an Alertmanager webhook receiver "
                                             "(POST /webhook) and /healthz, /readyz on this port and publish "
                                             "what arrives (0: off).")] = 0,
    listen_addr: Annotated[str, typer.Option(help="Address the webhook receiver listens on.")] = "127.0.0.1",
    cluster: Annotated[str, typer.Option(help="Cluster of received alerts without a cluster label.")] = "default",
    resend_s: Annotated[float, typer.Option(callback=bounded(1.0, 3600.0), help="Post open alerts again this "
                                            "often, [1, 3600] seconds (under Alertmanager's resolve_timeout).")
                        ] = 60.0,
) -> None:
    """Forward the bus's alerts to Alertmanager and publish Alertmanager's notifications on the bus
    (runs the alert-bridge service). NATS from NATS_URL (NATS_USER / NATS_PASSWORD when the server
    requires a user)."""
    if not alertmanager and not listen_port:
        raise typer.BadParameter("give --alertmanager, --listen-port or both")
    if not service_built(BRIDGE_MODULE):
        typer.echo(f"the alert-bridge service is not installed: pip install -e services/alert_bridge "
                   f"({BRIDGE_MODULE} not found)", err=True)
        raise typer.Exit(2)
    env = bridge_env(alertmanager=alertmanager, listen_port=listen_port, listen_addr=listen_addr, cluster=cluster,
                     resend_s=resend_s, base=os.environ)
    argv = service_command(BRIDGE_MODULE)
    os.execve(argv[0], argv, env)
