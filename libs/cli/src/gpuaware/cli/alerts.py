"""``gpuaware alerts bridge``: run the alert-bridge service from command-line options.

The bridge is a service (``gpuaware.services.alert_bridge``, what the chart deploys); this command
only turns its options into the service's ``GPUAWARE_ALERT_BRIDGE_*`` settings and replaces itself
with ``python -m gpuaware.services.alert_bridge``, so there is one implementation. NATS comes from
``--nats-url`` (or ``NATS_URL``; ``NATS_USER`` / ``NATS_PASSWORD`` when the server requires a user:
``alert-bridge`` is the least-privilege identity made for it), verified with ``--tls-ca`` when it
speaks TLS (or ``NATS_TLS_CA``, else the CA of the ``gpuaware up --tls`` stack whose URL it is:
``options.nats_connection``), handed to the service as ``NATS_URL`` / ``NATS_TLS_CA``.

Before handing over, the command tries the connection once: a refusal that waiting cannot cure (a
certificate that does not verify, an authorization violation) ends it with ``cannot reach NATS at
URL: <reason>`` on standard error (exit 3), where the service would retry it for ever; a NATS that is
merely not up yet is left to the service, which waits for it as it does in the cluster.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Mapping
from typing import Annotated, Any

import typer

from gpuaware.cli.options import bounded, nats_connection, refuse
from gpuaware.cli.processes import service_built, service_command

__all__ = ["BRIDGE_MODULE", "app", "bridge_env", "hopeless_connection"]

BRIDGE_MODULE = "gpuaware.services.alert_bridge"
PREFIX = "GPUAWARE_ALERT_BRIDGE_"

app = typer.Typer(help="Alerts: the bus <-> Alertmanager.", no_args_is_help=True)


def bridge_env(*, alertmanager: str, listen_port: int, listen_addr: str, cluster: str, resend_s: float,
               base: Mapping[str, str]) -> dict[str, str]:
    """The service's environment for these options, on top of ``base`` (the caller's environment)."""
    return {**base, f"{PREFIX}ALERTMANAGER_URL": alertmanager, f"{PREFIX}LISTEN_PORT": str(listen_port),
            f"{PREFIX}LISTEN_ADDR": listen_addr, f"{PREFIX}CLUSTER": cluster, f"{PREFIX}RESEND_S": f"{resend_s:g}",
            f"{PREFIX}LOG_FORMAT": base.get(f"{PREFIX}LOG_FORMAT", "console")}


async def hopeless_connection(nats_url: str, options: dict[str, Any], timeout: float = 10.0) -> str:
    """Why NATS at ``nats_url`` refuses this connection for good (a certificate that does not verify, an
    authorization violation, a URL that names no server), or "" when it takes it, or is only not up yet
    (nothing listens, no answer within ``timeout``): the service waits for that one.

    The client's errors are taken as they happen (its ``error_cb``), not from the attempt's end: after a
    failed TLS handshake, closing the connection can wait on its socket indefinitely."""
    from gpuaware import bus

    seen: list[BaseException] = []
    hopeless = asyncio.Event()

    def for_good(exc: BaseException) -> bool:
        return isinstance(exc, ssl.SSLError) or not isinstance(exc, (OSError, TimeoutError, asyncio.CancelledError))

    async def remember(exc: BaseException) -> None:
        seen.append(exc)
        if for_good(exc):
            hopeless.set()

    attempt = asyncio.ensure_future(bus.connect(nats_url, name="gpuaware-alerts-cli", allow_reconnect=False,
                                                error_cb=remember, **options))
    verdict = asyncio.ensure_future(hopeless.wait())
    await asyncio.wait({attempt, verdict}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    verdict.cancel()
    if attempt.done() and not attempt.cancelled():
        if attempt.exception() is None:
            await attempt.result().close()
            return ""
        seen.append(attempt.exception())  # type: ignore[arg-type]  # done and failed: an exception
    else:
        attempt.cancel()
        await asyncio.wait({attempt}, timeout=2.0)
    why = next((exc for exc in seen if for_good(exc)), None)
    return f"{type(why).__name__}: {why}" if why is not None else ""


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
    nats_url: Annotated[str, typer.Option("--nats-url", envvar="NATS_URL", help="NATS server(s) of the "
                                          "platform.")] = "nats://127.0.0.1:4222",
    tls_ca: Annotated[str, typer.Option("--tls-ca", envvar="NATS_TLS_CA", show_default=False,
                                        help="CA certificate (PEM) to verify a TLS NATS with. Default: "
                                             "NATS_TLS_CA, else the CA of the `gpuaware up --tls` stack in "
                                             ".gpuaware when --nats-url is its URL.")] = "",
) -> None:
    """Forward the bus's alerts to Alertmanager and publish Alertmanager's notifications on the bus
    (runs the alert-bridge service). NATS from --nats-url (NATS_USER / NATS_PASSWORD when the server
    requires a user), verified with --tls-ca when it speaks TLS."""
    if not alertmanager and not listen_port:
        raise typer.BadParameter("give --alertmanager, --listen-port or both")
    if not service_built(BRIDGE_MODULE):
        typer.echo(f"the alert-bridge service is not installed: pip install -e services/alert_bridge "
                   f"({BRIDGE_MODULE} not found)", err=True)
        raise typer.Exit(2)
    options, ca = nats_connection(nats_url, tls_ca)
    refused = asyncio.run(hopeless_connection(nats_url, options))
    if refused:
        refuse(refused, label=f"cannot reach NATS at {nats_url}", code=3)
    env = bridge_env(alertmanager=alertmanager, listen_port=listen_port, listen_addr=listen_addr, cluster=cluster,
                     resend_s=resend_s, base={**os.environ, "NATS_URL": nats_url, **({"NATS_TLS_CA": ca} if ca else {})})
    argv = service_command(BRIDGE_MODULE)
    os.execve(argv[0], argv, env)
