"""`gpuaware health`: GPU health scoring from the command line.

`evaluate` replays real HBM error logs (the Calchas study's format) per server, in time order, as ECC
telemetry through gpuaware.health (the code the health-scoring service runs) and scores the states
it reached against the peers' never-recover rule. It writes DIR/summary.json (the contract of issue
13), DIR/detail.json (what was caught and how, the configuration), DIR/episodes.csv (one row per UE
episode) and DIR/escalations.csv (every transition into degraded or quarantined).

`cordon` / `uncordon` are the manual override: a `health.cordon` request to the running health-scoring
service, which pins the GPU's state (or gives it back to the evidence), records who, when and why in
PostgreSQL and publishes the state change with the same in its reasons. The NATS connection is
`--nats-url` (or NATS_URL), as `NATS_USER` / `NATS_PASSWORD` when set (an operator's identity); a TLS
server is verified with `--tls-ca` (or NATS_TLS_CA, else the CA of the `gpuaware up --tls` stack running
in .gpuaware when the URL is its own: `options.nats_connection`).
A NATS out of reach fails within `--timeout` seconds with the connection's last error on standard
error (exit 3); a refusal by the service exits 1.

`evaluate` checks its bounds first (lead hours: at most 32, each 0..8760) and writes its folder
atomically (options.atomic_folder), strict JSON only.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import getpass
import os
import socket
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpuaware import bus
from gpuaware.cli.options import (
    atomic_folder,
    bounded,
    int_list,
    nats_connection,
    out_folder,
    refuse,
    strict_json,
)
from gpuaware.health import HealthConfig
from gpuaware.schemas import HEALTH_CORDON, CordonAction, CordonReply, CordonRequest, HealthState
from gpuaware.sim import HbmEvaluation, HbmFormatError, evaluate_hbm, parse_hbm_csv

app = typer.Typer(help="GPU health scoring: evaluate it on real fault data, cordon and uncordon GPUs.",
                  no_args_is_help=True)


@app.callback()
def _group() -> None:
    """GPU health scoring (evaluate, cordon, uncordon)."""


LEAD_MAX_H = 8760
MOST_LEADS = 32


def parse_lead_hours(text: str) -> list[int]:
    """'1,6,24' -> [1, 6, 24] (sorted, unique whole hours, each 0..``LEAD_MAX_H``, at most ``MOST_LEADS``)."""
    return int_list(text, name="--lead-hours", lo=0, hi=LEAD_MAX_H, most=MOST_LEADS)


def write_outputs(out: Path, result: HbmEvaluation, source: Path, config: HealthConfig) -> None:
    """summary.json, detail.json, episodes.csv and escalations.csv into ``out`` (an existing folder)."""
    (out / "summary.json").write_text(strict_json(result.summary()))
    detail = {"hbm_errors": str(source), **result.detail(), "config": dataclasses.asdict(config)}
    (out / "detail.json").write_text(strict_json(detail))
    leads = [str(L) for L in result.lead_hours]
    with (out / "episodes.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["server", "time", "first_on_server", *(f"caught_{L}h" for L in leads),
                    *(f"baseline_{L}h" for L in leads)])
        for r in result.episode_rows:
            w.writerow([r["server"], int(r["time"]), int(r["first"]), *(int(r["caught"][L]) for L in leads),
                        *(int(r["baseline"][L]) for L in leads)])
    with (out / "escalations.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["server", "time", "from", "to", "reasons"])
        names = ("healthy", "degraded", "quarantined")
        for server, rep in sorted(result.replays.items()):
            for t, a, b, reasons in rep.escalations:
                w.writerow([server, int(t), names[a], names[b], " ".join(reasons)])


@app.command("evaluate")
def evaluate(
    hbm_errors: Annotated[Path, typer.Option(
        "--hbm-errors", help="HBM error log in the Calchas format (columns Server, Time, EccType: CE/UER/UEO)",
        exists=True, dir_okay=False, readable=True)],
    out: Annotated[Path, typer.Option("--out", help="output directory (summary.json and details)",
                                      callback=out_folder)],
    lead_hours: Annotated[str, typer.Option(
        "--lead-hours", help="a UE episode counts as caught when the server was degraded or quarantined "
        f"this many hours before it (comma-separated, at most {MOST_LEADS}, each 0-{LEAD_MAX_H})")] = "1,6,24",
) -> None:
    """Replay HBM errors through the health scoring and compare with the never-recover rule.

    Each server's errors become hourly ECC telemetry, scored in time order by the code the service runs;
    the states it reaches give recall at each lead, precision, and quarantined / degraded server-hours."""
    console = Console(width=max(Console().width, 120))
    leads = parse_lead_hours(lead_hours)
    try:
        with hbm_errors.open(newline="", encoding="utf-8") as f:
            events = parse_hbm_csv(f)
    except HbmFormatError as exc:
        refuse(f"{hbm_errors}: {exc}")
    except UnicodeDecodeError as exc:
        refuse(f"{hbm_errors}: not UTF-8 text (byte {exc.start}: {exc.reason}); expected the Calchas CSV")
    except OSError as exc:
        refuse(f"{hbm_errors}: {exc.strerror or exc}", label="cannot read", code=3)
    config = HealthConfig()
    servers = len({e.server for e in events})
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:  # fmt: skip
        task = progress.add_task("replaying servers", total=servers)
        try:
            result = evaluate_hbm(events, lead_hours=leads, config=config,
                                  on_server=lambda s: progress.update(task, advance=1, description=f"server {s}"))
        except HbmFormatError as exc:
            progress.stop()
            refuse(f"{hbm_errors}: {exc}")
    with atomic_folder(out) as tmp:
        write_outputs(tmp, result, hbm_errors, config)

    s = result.summary()
    table = Table(title=f"{s['servers']} servers, {s['ue_episodes']} UE episodes — {hbm_errors.name}")
    for col in ("lead", "recall", "precision", "never-recover recall"):
        table.add_column(col, justify="right")
    for L in map(str, result.lead_hours):
        table.add_row(f"{L} h", f"{s['lead_hours'][L]['recall']:.3f}", f"{s['lead_hours'][L]['precision']:.3f}",
                      f"{s['baseline_any_ue_forever']['recall_at'][L]:.3f}")
    console.print(table)
    base = s["baseline_any_ue_forever"]["unhealthy_server_hours"]
    console.print(f"server-hours: quarantined {s['quarantined_server_hours']:,.0f}, degraded "
                  f"{s['degraded_server_hours']:,.0f}; the never-recover rule withholds {base:,.0f}")
    console.print(f"wrote {out / 'summary.json'}, detail.json, episodes.csv, escalations.csv")


# --- manual override -------------------------------------------------------------------------------------

NatsUrl = Annotated[str, typer.Option("--nats-url", envvar="NATS_URL", help="NATS server(s) of the platform.")]
Cluster = Annotated[str, typer.Option("--cluster", help="The cluster the GPU belongs to (the service's cluster).")]
Reason = Annotated[str, typer.Option("--reason", help="Why (kept in the audit and the state change's reasons).")]
By = Annotated[str, typer.Option("--by", help="Who asks (default: user@host).")]
Timeout = Annotated[float, typer.Option("--timeout", help="Seconds to reach NATS and for the service's answer "
                                        "each, (0, 300].", callback=bounded(0.0, 300.0, lo_open=True))]


TlsCa = Annotated[str, typer.Option("--tls-ca", envvar="NATS_TLS_CA", show_default=False,
                                    help="CA certificate (PEM) to verify a TLS NATS with. Default: NATS_TLS_CA, "
                                         "else the CA of the `gpuaware up --tls` stack in .gpuaware when "
                                         "--nats-url is its URL.")]


class Unreachable(Exception):
    """NATS did not take the connection within the timeout; the message is the connection's last error."""


def _me() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:  # no login name in a container
        return f"uid{os.getuid()}@{socket.gethostname()}"


async def request_override(req: CordonRequest, nats_url: str, *, timeout: float = 10.0,
                           tls_ca: str = "") -> CordonReply:
    """Send one ``health.cordon`` request (as NATS_USER when set) and return the service's reply.
    Raises ``Unreachable`` (with the last connection error) when NATS is not reached within ``timeout``."""
    options, _ca = nats_connection(nats_url, tls_ca)
    last: list[BaseException] = []

    async def remember(exc: Exception) -> None:  # instead of a warning per failed attempt
        last[:] = [exc]

    servers = [u.strip() for u in nats_url.split(",") if u.strip()]
    if not servers:
        raise Unreachable("no NATS URL given")
    try:
        connecting = bus.connected(servers, name="gpuaware-health-cli", initial_timeout=timeout, error_cb=remember,
                                   **options)
        nc = await connecting.__aenter__()
    except (TimeoutError, OSError) as exc:
        why = last[0] if last else exc
        raise Unreachable(f"{type(why).__name__}: {why}" if str(why) else type(why).__name__) from None
    except Exception as exc:  # nats-py's own errors (a malformed URL, no servers, an auth failure)
        raise Unreachable(f"{type(exc).__name__}: {exc}") from None
    try:
        return await bus.request(nc, HEALTH_CORDON, req, CordonReply, timeout=timeout)
    finally:
        await connecting.__aexit__(None, None, None)


def _override(req: CordonRequest, nats_url: str, timeout: float = 10.0, tls_ca: str = "") -> None:
    """Send the request; every error is refused on standard error with its reason (3: NATS or the
    service out of reach, 1: the service refused)."""
    console = Console()
    if not req.reason.strip():
        raise typer.BadParameter("--reason must say why (it is kept for the audit)")
    try:
        reply = asyncio.run(request_override(req, nats_url, timeout=timeout, tls_ca=tls_ca))
    except Unreachable as exc:
        refuse(exc, label=f"cannot reach NATS at {nats_url}", code=3)
    except bus.NoResponders:
        refuse("no health-scoring service answers health.cordon (is it running on this NATS?)",
               label="no responder", code=3)
    except bus.RequestTimeout as exc:
        refuse(exc, label="no answer", code=3)
    except bus.ServiceError as exc:
        refuse(exc.description, label=f"refused ({exc.code})", code=1)
    change = f"{reply.previous.value} -> {reply.current.value}" if reply.changed else f"stays {reply.current.value}"
    console.print(f"{reply.action.value} GPU {reply.gpu_uuid}{f' on {reply.node}' if reply.node else ''}: {change}"
                  f"{' (history cleared)' if reply.cleared else ''}; recorded: by {reply.by} at "
                  f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(reply.at))}, reason: {reply.reason}")


@app.command("cordon")
def cordon(
    gpu: Annotated[str, typer.Argument(help="GPU uuid (GPU-...).")],
    reason: Reason,
    by: By = "",
    degraded: Annotated[bool, typer.Option("--degraded", help="Pin degraded (failure-tolerant work only) "
                                                              "instead of quarantined (no work).")] = False,
    cluster: Cluster = "default",
    nats_url: NatsUrl = "nats://127.0.0.1:4222",
    timeout: Timeout = 10.0,
    tls_ca: TlsCa = "",
) -> None:
    """Take a GPU away from new work by hand, whatever its telemetry says (audited)."""
    _override(CordonRequest(source="gpuaware-cli", emitted_at=time.time(), cluster=cluster, gpu_uuid=gpu,
                            reason=reason, by=by or _me(), action=CordonAction.CORDON,
                            state=HealthState.DEGRADED if degraded else HealthState.QUARANTINED), nats_url, timeout,
              tls_ca)


@app.command("uncordon")
def uncordon(
    gpu: Annotated[str, typer.Argument(help="GPU uuid (GPU-...).")],
    reason: Reason,
    by: By = "",
    clear: Annotated[bool, typer.Option("--clear", help="The GPU was repaired or replaced: forget its error "
                                                        "history, back to healthy (else the evidence decides).")
                     ] = False,
    cluster: Cluster = "default",
    nats_url: NatsUrl = "nats://127.0.0.1:4222",
    timeout: Timeout = 10.0,
    tls_ca: TlsCa = "",
) -> None:
    """Give a GPU back to its telemetry's verdict (with --clear: to healthy, history forgotten); audited."""
    _override(CordonRequest(source="gpuaware-cli", emitted_at=time.time(), cluster=cluster, gpu_uuid=gpu,
                            reason=reason, by=by or _me(), action=CordonAction.UNCORDON, clear=clear), nats_url,
              timeout, tls_ca)
