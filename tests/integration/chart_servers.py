"""The servers a chart install expects to find, on this machine: NATS with the chart's own authorization,
PostgreSQL with password logins, and (when installed) a real Alertmanager.

* NATS: a JetStream nats-server whose configuration includes the rendered ``auth.conf`` ConfigMap,
  with each ``$NATS_PASSWORD_<IDENTITY>`` it names set from the rendered credentials Secret, as the
  chart's bundled NATS (and its note for an external one) gives them.
* PostgreSQL: the embedded server (``gpuaware.devstack``); the login the provisioning Job's DSN
  names is created as an operator would before installing (it owns the database, may create roles
  and read the server's settings); every other connection then needs its password
  (``scram-sha-256``), so a workload handed the wrong credential fails here as it would in a cluster.
* Alertmanager: Debian's ``prometheus-alertmanager`` on a free port, each alert its own group,
  notifying a webhook of the harness at once (firing and resolved); the test reads its API too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psycopg
from chart_processes import ChartRunError, Rendered
from psycopg import sql

from gpuaware.devstack import PostgresProcess, free_port, nats_server_binary

__all__ = ["ALERTMANAGER", "AlertmanagerProcess", "LocalNats", "Notifications", "prepare_database", "start_alertmanager",
           "start_chart_nats"]

ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
_PASSWORD_VAR = re.compile(r"\$NATS_PASSWORD_([A-Z0-9_]+)")


@dataclass
class LocalNats:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        _stop(self.proc)


@dataclass
class AlertmanagerProcess:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alerts(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=5) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        _stop(self.proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path, what: str, timeout: float = 30.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise ChartRunError(f"{what} exited ({proc.returncode}):\n{log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise ChartRunError(f"{what} did not listen on {port}:\n"
                                    f"{log.read_text(errors='replace')[-2000:]}") from None
            time.sleep(0.1)


def start_chart_nats(rendered: Rendered, data_dir: Path, port: int) -> LocalNats:
    """nats-server with JetStream and the chart's authorization block (its passwords from the Secret)."""
    configs = [d for d in rendered.objects("ConfigMap") if "auth.conf" in (d.get("data") or {})]
    if not configs:
        raise ChartRunError("the chart renders no NATS authorization ConfigMap (nats.auth.enabled is off?)")
    auth = configs[0]["data"]["auth.conf"]
    secrets = [d for d in rendered.objects("Secret") if d["metadata"]["name"].endswith("-nats-credentials")]
    if not secrets:
        raise ChartRunError("the chart renders no NATS credentials Secret")
    passwords = rendered.data("Secret", secrets[0]["metadata"]["name"])
    by_var = {identity.upper().replace("-", "_"): pw for identity, pw in passwords.items()}
    env = {"PATH": os.environ.get("PATH", "")}
    for var in sorted(set(_PASSWORD_VAR.findall(auth))):
        if var not in by_var:
            raise ChartRunError(f"auth.conf names $NATS_PASSWORD_{var}, which the credentials Secret does not hold")
        env[f"NATS_PASSWORD_{var}"] = by_var[var]
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "auth.conf").write_text(auth)
    monitor = free_port()
    (data_dir / "server.conf").write_text(
        f"listen: 127.0.0.1:{port}\nhttp: 127.0.0.1:{monitor}\n"
        f"jetstream {{ store_dir: {json.dumps(str(data_dir / 'jetstream'))}, max_file_store: 1099511627776 }}\n"
        "include ./auth.conf\n")
    log = data_dir / "nats-server.log"
    with log.open("ab") as out:
        proc = subprocess.Popen([str(nats_server_binary()), "-c", str(data_dir / "server.conf")], env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    _wait_listening(port, proc, log, "nats-server")
    return LocalNats(port=port, proc=proc, log=log)


def prepare_database(pg: PostgresProcess, owner_url: str) -> None:
    """The login ``owner_url`` names (the provisioning Job's DSN), owning its database and allowed to
    create roles; then password authentication for every login but the local superuser."""
    parts = urlsplit(owner_url)
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    if not user:
        raise ChartRunError("the provisioning Job's DATABASE_URL names no user")
    with psycopg.connect(pg.admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,)).fetchone()
        verb = "ALTER" if exists else "CREATE"
        conn.execute(sql.SQL(f"{verb} ROLE {{}} LOGIN CREATEROLE PASSWORD {{}}").format(
            sql.Identifier(user), sql.Literal(password or None)))
        conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
            sql.Identifier(pg.database), sql.Identifier(user)))
        # the migrator reads shared_preload_libraries (is TimescaleDB there?), a setting only this
        # predefined role (or a superuser) may examine
        conn.execute(sql.SQL("GRANT pg_read_all_settings TO {}").format(sql.Identifier(user)))
        hba = Path(conn.execute("SHOW hba_file").fetchone()[0])
        hba.write_text("local all all trust\n"
                       "host all postgres 127.0.0.1/32 trust\n"
                       "host all all 127.0.0.1/32 scram-sha-256\n")
        conn.execute("SELECT pg_reload_conf()")


class Notifications:
    """Alertmanager's webhook notifications as they arrive: (the alert's ``label``, its status). An alert
    raised and resolved between two looks at the API would be missed there; Alertmanager notifies both."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with outer._lock:
                    outer.seen += [(str(a.get("labels", {}).get(outer.label, "")), str(a.get("status", "")))
                                   for a in body.get("alerts", [])]
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, name="alertmanager-webhook", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def statuses(self, key: str) -> list[str]:
        with self._lock:
            return [status for k, status in self.seen if k == key]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_alertmanager(work: Path, port: int, webhook: str) -> AlertmanagerProcess:
    """A real Alertmanager notifying ``webhook`` of every alert (firing and resolved) at once."""
    if ALERTMANAGER is None:
        raise ChartRunError("prometheus-alertmanager is not installed")
    work.mkdir(parents=True, exist_ok=True)
    (work / "am.yml").write_text(
        "route: {receiver: harness, group_by: ['...'], group_wait: 0s, group_interval: 1s, repeat_interval: 1h}\n"
        f"receivers:\n  - name: harness\n    webhook_configs: [{{url: '{webhook}', send_resolved: true}}]\n")
    log = work / "alertmanager.log"
    with log.open("ab") as out:
        proc = subprocess.Popen([ALERTMANAGER, f"--config.file={work / 'am.yml'}", f"--storage.path={work / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                                stdout=subprocess.DEVNULL, stderr=out, stdin=subprocess.DEVNULL)
    _wait_listening(port, proc, log, "alertmanager")
    return AlertmanagerProcess(port=port, proc=proc, log=log)
