"""The chart, run as processes (``make test-chart-run``): the closest thing to ``helm install`` one machine
allows, proving the chart's wiring (environment names, identities, permissions, migrations) rather
than its YAML.

1. Render ``helm/gpuaware`` with the real Helm engine: default values and the bundled profile
   ``ci/processes-values.yaml`` (placement's NATS lease, the binder's digital twin with an
   uncorrectable-ECC storm on one GPU, the alert bridge pointed at an Alertmanager).
2. Play the servers the chart expects (``chart_servers``): NATS with the chart's authorization block
   and passwords, PostgreSQL with the provisioning Job's login, a real Alertmanager when installed.
3. Start exactly the rendered pods (``chart_processes``): the provisioning Job first, to completion;
   then every Deployment's pods together, until each is ready (its readinessProbe, else its metrics
   port answering), the digital twin's last (its clock starts with it, as a cluster's nodes exist
   before the chart); then the DaemonSets' pods, one per node of the twin's world.
4. Watch the short replay: every pod that arrived is decided, bound and recorded (``placement_events``);
   an alert of the injected GPU fault is raised and resolved on the bus and fires, then resolves, in
   Alertmanager (its API, and the notifications it sends); every dashboard panel's SQL returns rows.

Run alone: ``python tests/integration/chart_run.py``; it prints the summary, writes
``bench/results/chart-run.json`` and exits non-zero when a check fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _p in (HERE, REPO / "tests" / "helm"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from chart_helpers import CHART, render  # noqa: E402
from chart_processes import ChartRunError, External, PodProcess, Rendered, plan_pods  # noqa: E402
from chart_servers import (  # noqa: E402
    ALERTMANAGER,
    AlertmanagerProcess,
    LocalNats,
    Notifications,
    prepare_database,
    start_alertmanager,
    start_chart_nats,
)

from gpuaware.devstack import PostgresProcess, StackError, free_port, start_postgres  # noqa: E402

__all__ = ["PROFILE", "RESULTS", "ChartRun", "run_chart"]

PROFILE = "processes"
NAMESPACE = "gpuaware-system"
RESULTS = REPO / "bench" / "results" / "chart-run.json"
_TABLES = re.compile(r"\b(?:FROM|JOIN)\s+([a-z_][a-z0-9_]*)")
BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "GPUAWARE_SHARED_DATA", "NUMBA_CACHE_DIR")
"""what a container's environment has besides the pod's (the image's PATH and locale): nothing of the
harness's own NATS_URL / DATABASE_URL leaks into a workload"""


@dataclass
class Running:
    pod: PodProcess
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Observed:
    """What crossed NATS during the run (the harness listens as the chart's admin user)."""

    pending: set[str] = field(default_factory=set)
    decided: set[str] = field(default_factory=set)
    bound: set[str] = field(default_factory=set)
    unschedulable: set[str] = field(default_factory=set)
    grows: set[str] = field(default_factory=set)
    """an elastic job's extra workers whose latest verdict is ``elastic_grow`` (waiting for idle GPUs)"""
    withdrawn: set[str] = field(default_factory=set)
    """an elastic job's workers withdrawn unplaced when their job finished"""
    raised: dict[str, tuple[str, str]] = field(default_factory=dict)
    """fingerprint -> (rule, node) of the alerts raised on the bus"""
    resolved: set[str] = field(default_factory=set)
    messages: dict[str, int] = field(default_factory=dict)
    """messages per subject (the cluster's suffix left out)"""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def expected(self) -> set[str]:
        """The pods that must be decided, bound and recorded: every pod that arrived, but an elastic
        job's extra workers withdrawn unplaced or still waiting for idle GPUs (a grow takes nobody's)."""
        return set(self.pending) - (self.withdrawn - self.bound) - (self.grows - self.decided)


@dataclass
class ChartRun:
    """The run's summary (``as_json`` is what ``bench/results/chart-run.json`` holds)."""

    processes: list[dict[str, Any]] = field(default_factory=list)
    pods: dict[str, int] = field(default_factory=dict)
    messages: dict[str, int] = field(default_factory=dict)
    """the loop's and the alerts' messages seen on NATS, per subject"""
    alert: dict[str, Any] = field(default_factory=dict)
    panels: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """checks that could not be made, and why (a workload the chart does not render yet, a tool absent)"""
    failures: list[str] = field(default_factory=list)
    timeline_s: dict[str, float] = field(default_factory=dict)
    """wall seconds from the start of the run to each milestone (where the time goes)"""
    started: float = field(default_factory=time.monotonic)

    def mark(self, milestone: str) -> None:
        self.timeline_s.setdefault(milestone, round(time.monotonic() - self.started, 1))

    @property
    def ok(self) -> bool:
        return not self.failures

    def as_json(self) -> dict[str, Any]:
        return {"chart": _rel(CHART), "profile": _rel(CHART / "ci" / f"{PROFILE}-values.yaml"),
                "processes": self.processes, "pods": self.pods, "alert": self.alert,
                "messages": self.messages, "panels": self.panels, "panels_with_rows": sum(1 for p in self.panels if p.get("rows")),
                "timeline_s": self.timeline_s, "missing": self.missing, "failures": self.failures, "ok": self.ok}

    def lines(self) -> list[str]:
        started = [p for p in self.processes if p["kind"] != "Job"]
        out = [f"processes started from the chart: {len(self.processes)} "
               f"({len(started)} services and agents, {len(self.processes) - len(started)} job)"]
        out += [f"  {p['pod']}: {' '.join(p['argv'])}" for p in self.processes]
        out.append("pods: {arrived} arrived, {decided} decided, {bound} bound, {recorded} recorded".format(
            **{k: self.pods.get(k, 0) for k in ("arrived", "decided", "bound", "recorded")}))
        out.append(f"injected fault's alert {self.alert.get('rule') or '-'} (raised: "
                   f"{', '.join(self.alert.get('raised', [])) or 'none'}): bus {self.alert.get('bus', '-')}, "
                   f"Alertmanager {self.alert.get('alertmanager', '-')}")
        out.append("messages: " + ", ".join(f"{k} {v}" for k, v in self.messages.items()))
        with_rows = sum(1 for p in self.panels if p.get("rows"))
        out.append(f"dashboard panels with rows: {with_rows}/{len(self.panels)}")
        out += [f"  no rows: {p['dashboard']} / {p['title']}{' (' + p['error'] + ')' if 'error' in p else ''}"
                for p in self.panels if not p.get("rows")]
        out += [f"  stat {p['dashboard']} / {p['title']}: {p['value']}" for p in self.panels if "value" in p]
        out += [f"{p['pod']} exited {p['exit']} when stopped" for p in self.processes
                if p.get("exit") not in (0, None)]
        out.append("timeline (s): " + ", ".join(f"{k} {v:g}" for k, v in self.timeline_s.items()))
        out += [f"not checked: {m}" for m in self.missing]
        out += [f"FAILED: {f}" for f in self.failures]
        return out


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return Path(path).name


def chart_values() -> dict[str, Any]:
    """The values the profile renders with: the chart's defaults under the profile's."""
    def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        for k, v in b.items():
            a[k] = merge(dict(a[k]), v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
        return a

    return merge(yaml.safe_load((CHART / "values.yaml").read_text()),
                 yaml.safe_load((CHART / "ci" / f"{PROFILE}-values.yaml").read_text()))


def operator_secrets(values: dict[str, Any]) -> list[dict[str, Any]]:
    """What an operator creates before installing: the database owner's Secret the values name
    (``database.existingSecret``: ``url``, the owner's DSN on ``database.server``, a fresh password)."""
    db = values.get("database") or {}
    if not db.get("existingSecret"):
        return []
    password = secrets.token_urlsafe(24)
    return [{"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
             "metadata": {"name": db["existingSecret"], "namespace": NAMESPACE},
             "stringData": {"url": f"postgresql://gpuaware:{password}@{db['server']}"}}]


def _image_name(image: str) -> str:
    return image.rsplit("/", 1)[-1].split(":", 1)[0]


def _start(pod: PodProcess, logs: Path) -> Running:
    env = {k: os.environ[k] for k in BASE_ENV if k in os.environ}
    env.update(PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")  # as the image's ENV
    env.update(pod.env)
    log = logs / f"{pod.pod}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(pod.argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=str(logs), start_new_session=True)
    return Running(pod=pod, proc=proc, log=log)


def _stop(r: Running, timeout: float = 15.0) -> int | None:
    if r.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            r.proc.send_signal(signal.SIGTERM)
        try:
            r.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            r.proc.kill()
            r.proc.wait(5)
    return r.proc.returncode


def _http_ok(url: str) -> bool:
    import ssl

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the probe, like the kubelet's, does not verify the serving certificate
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return 200 <= resp.status < 400
    except OSError:
        return False


def _readiness_url(pod: PodProcess) -> str | None:
    probe = (pod.readiness or {}).get("httpGet")
    if probe:
        scheme = str(probe.get("scheme", "HTTP")).lower()
        return f"{scheme}://127.0.0.1:{probe['port']}{probe.get('path', '/')}"
    if "metrics" in pod.named_ports:
        return f"http://127.0.0.1:{pod.ports[pod.named_ports['metrics']]}/metrics"
    return None


async def _until(check: Any, what: str, deadline: float, running: list[Running], interval: float = 0.25) -> Any:
    """``check()`` until it returns something true; a dead process or the deadline fails it."""
    while True:
        got = await asyncio.to_thread(check) if not asyncio.iscoroutinefunction(check) else await check()
        if got:
            return got
        _check_alive(running)
        if time.monotonic() > deadline:
            raise ChartRunError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)


def _check_alive(running: list[Running]) -> None:
    for r in running:
        if r.pod.kind != "Job" and not r.alive():
            raise ChartRunError(f"{r.pod.pod} exited ({r.proc.returncode}); its log ({_rel(r.log)}):\n{r.tail()}")


class Harness:
    """One run: servers, processes, observations (``run_chart`` drives it)."""

    def __init__(self, work: Path, budget_s: float) -> None:
        self.work, self.deadline = work, time.monotonic() + budget_s
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.values = chart_values()
        self.rendered = Rendered([*render(profile=PROFILE), *operator_secrets(self.values)], NAMESPACE)
        self.cluster = str(self.values["cluster"])
        self.summary = ChartRun()
        self.running: list[Running] = []
        self.ports: dict[tuple[str, int], int] = {}
        self.nats_port, self.pg_port = free_port(), free_port()
        self.am_port = free_port()
        am_url = str((self.values.get("alertBridge") or {}).get("alertmanagerUrl") or "")
        self.am_host = urlsplit(am_url).hostname or ""
        self.externals = [External("nats", ("nats", "tls"), self.nats_port),
                          External("postgresql", ("postgresql", "postgres"), self.pg_port)]
        if self.am_host:
            self.externals.append(External("alertmanager", ("http", "https"), self.am_port, host=self.am_host))
        self.nats: LocalNats | None = None
        self.pg: PostgresProcess | None = None
        self.am: AlertmanagerProcess | None = None
        self.notified: Notifications | None = None
        self.observed = Observed()
        self.nc: Any = None
        self.t0 = datetime.now(UTC)

    def plan(self, nodes: list[str]) -> list[PodProcess]:
        return plan_pods(self.rendered, externals=self.externals, nodes=nodes, root=self.work, ports=self.ports)

    # --- servers --------------------------------------------------------------------------------
    def start_servers(self, pods: list[PodProcess]) -> None:
        owners = [p.env["DATABASE_URL"] for p in pods if p.kind == "Job" and "DATABASE_URL" in p.env] or \
                 [p.env[k] for p in pods for k in sorted(p.env) if p.env[k].startswith(("postgresql://", "postgres://"))]
        if not owners:
            raise ChartRunError("no workload of the chart is given a database URL (database.url in the profile?)")
        database = urlsplit(owners[0]).path.lstrip("/") or "postgres"
        self.pg = start_postgres(self.work / "postgres", port=self.pg_port, database=database)
        prepare_database(self.pg, owners[0])
        self.nats = start_chart_nats(self.rendered, self.work / "nats", self.nats_port)
        if self.am_host and ALERTMANAGER is not None:
            from gpuaware.alerting import FINGERPRINT_LABEL

            self.notified = Notifications(FINGERPRINT_LABEL)
            self.am = start_alertmanager(self.work / "alertmanager", self.am_port, self.notified.url)

    async def connect_admin(self) -> None:
        """The harness's own NATS connection, as the chart's ``admin`` user, listening to the loop."""
        import nats

        password = self.rendered.data("Secret", next(
            d["metadata"]["name"] for d in self.rendered.objects("Secret")
            if d["metadata"]["name"].endswith("-nats-credentials")))["admin"]
        self.nc = await nats.connect(f"nats://127.0.0.1:{self.nats_port}", user="admin", password=password,
                                     name="chart-run", max_reconnect_attempts=-1)
        obs = self.observed

        async def on(msg: Any) -> None:
            try:
                body = json.loads(msg.data)
            except ValueError:
                return
            subject, uid = msg.subject, str(body.get("pod_uid", ""))
            base = subject.split(".v1.", 1)[0] + ".v1" if ".v1." in subject else subject
            obs.messages[base] = obs.messages.get(base, 0) + 1
            for prefix, seen in (("binder.pod.pending.", obs.pending), ("placement.pod.decided.", obs.decided),
                                 ("binder.pod.bound.", obs.bound),
                                 ("placement.pod.unschedulable.", obs.unschedulable)):
                if subject.startswith(prefix) and uid:
                    seen.add(uid)
            if subject.startswith("placement.pod.unschedulable.") and uid:
                (obs.grows.add if body.get("reason") == "elastic_grow" else obs.grows.discard)(uid)
            if subject.startswith("placement.pod.decided.") and uid:
                obs.grows.discard(uid)
            if subject.startswith("binder.pod.finished.") and uid and not body.get("node"):
                obs.withdrawn.add(uid)
            if subject.startswith("alerts.") and ".raised." in subject and body.get("fingerprint"):
                obs.raised[body["fingerprint"]] = (str(body.get("rule", "")), str(body.get("node", "")))
            if subject.startswith("alerts.") and ".resolved." in subject and body.get("fingerprint"):
                obs.resolved.add(body["fingerprint"])
            obs.changed.set()

        for subject in ("binder.pod.>", "placement.pod.>", "alerts.>"):
            await self.nc.subscribe(subject, cb=on)

    # --- processes ------------------------------------------------------------------------------
    def _record(self, pod: PodProcess) -> None:
        argv = [Path(pod.argv[0]).name, *pod.argv[1:]]
        if len(argv) > 2 and argv[1] == "-c":
            argv = [argv[0], "-c", "<script>"]
        self.summary.processes.append({"kind": pod.kind, "workload": pod.workload, "pod": pod.pod,
                                       "image": _image_name(pod.image), "argv": argv})

    async def run_job(self, pod: PodProcess) -> None:
        r = _start(pod, self.logs)
        self._record(pod)
        try:
            code = await asyncio.to_thread(r.proc.wait, max(1.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _stop(r)
            raise ChartRunError(f"Job {pod.workload} did not finish; its log ({_rel(r.log)}):\n{r.tail()}") from None
        self.summary.processes[-1]["exit"] = code
        if code != 0:
            raise ChartRunError(f"Job {pod.workload} failed ({code}); its log ({_rel(r.log)}):\n{r.tail()}")

    async def start_pod(self, pod: PodProcess) -> None:
        r = _start(pod, self.logs)
        self.running.append(r)
        self._record(pod)
        url = _readiness_url(pod)
        if url is not None:
            await _until(lambda: _http_ok(url), f"{pod.pod} to be ready ({url})", self.deadline, self.running)

    async def world_nodes(self) -> list[str]:
        """The GPU nodes, as the binder's world names them (where the DaemonSets' pods run)."""
        from gpuaware import bus
        from gpuaware.schemas import WORLD_SNAPSHOT, WorldSnapshotReply, WorldSnapshotRequest

        async def ask() -> list[str] | None:
            req = WorldSnapshotRequest(source="chart-run", emitted_at=time.time(), cluster=self.cluster,
                                       include_pods=False, limit=5000)
            try:
                page = await bus.request(self.nc, WORLD_SNAPSHOT, req, WorldSnapshotReply, timeout=2.0)
            except (bus.NoResponders, bus.RequestTimeout, bus.ServiceError):
                return None
            return [n.name for n in page.nodes] or None

        return await _until(ask, "the binder's world (world.snapshot)", self.deadline, self.running)

    def stop_all(self) -> None:
        for r in reversed(self.running):
            code = _stop(r)
            for p in self.summary.processes:
                if p["pod"] == r.pod.pod:
                    p["exit"] = code
        for server in (self.am, self.notified, self.nats):
            if server is not None:
                server.stop()
        if self.pg is not None:
            self.pg.stop()


async def _recorded(h: Harness) -> set[str]:
    """Pods with a decided and a bound row in ``placement_events``."""
    import psycopg

    assert h.pg is not None
    async with await psycopg.AsyncConnection.connect(h.pg.url) as conn:
        cur = await conn.execute(
            "SELECT pod_uid FROM placement_events WHERE cluster = %s GROUP BY pod_uid HAVING "
            "bool_or(subject LIKE 'placement.pod.decided%%') AND bool_or(subject LIKE 'binder.pod.bound%%')",
            (h.cluster,))
        return {r[0] for r in await cur.fetchall()}


async def _panels(h: Harness) -> list[dict[str, Any]]:
    """Every SQL panel of the dashboards, run as Grafana would over the run (wall and virtual time)."""
    import psycopg

    from gpuaware.dashboards import expand, sql_panels

    assert h.pg is not None
    start, end = h.t0 - timedelta(hours=1), h.t0 + timedelta(days=7)
    out = []
    async with await psycopg.AsyncConnection.connect(h.pg.url, autocommit=True) as conn:
        for p in sql_panels():
            entry: dict[str, Any] = {"dashboard": p.dashboard, "title": p.title,
                                     "reads": sorted(set(_TABLES.findall(p.sql)))}
            try:
                cur = await conn.execute(expand(p.sql, start, end, h.cluster))
                rows = await cur.fetchall()
                entry["rows"] = len(rows)
                if p.kind == "stat" and rows:
                    entry["value"] = _plain(rows[0][0])
            except psycopg.Error as exc:
                entry["rows"] = 0
                entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            out.append(entry)
    return out


def _plain(value: Any) -> Any:
    """A stat panel's value as strict JSON (numbers as numbers, anything else as text)."""
    if isinstance(value, bool) or value is None:
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(number):
        return None
    return int(number) if number.is_integer() else round(number, 6)


def _renders(h: Harness, image: str) -> bool:
    return any(_image_name(c["image"]) == image for w in h.rendered.workloads()
               for c in w["spec"]["template"]["spec"]["containers"])


def _ends(alert: dict[str, Any]) -> datetime:
    """An Alertmanager alert's ``endsAt`` (when it resolves, or when it expires unless re-sent)."""
    return datetime.fromisoformat(alert["endsAt"].replace("Z", "+00:00"))


def _fault_nodes(h: Harness) -> set[str]:
    """The nodes whose GPUs the chart's values inject faults into (the twin's ``*_FAULTS`` setting)."""
    nodes: set[str] = set()
    for r in h.running:
        for k, v in r.pod.env.items():
            if k.endswith("_FAULTS") and v.strip():
                nodes |= {str(f.get("node", "")) for f in json.loads(v)}
    return nodes - {""}


class AlertWatch:
    """The injected faults' alerts: raised then resolved on the bus (health-scoring), and firing then
    resolved in Alertmanager (the bridge), matched by the fingerprint label the bridge sets: listed
    active by its API, then no longer; or notified firing, then resolved, by Alertmanager itself."""

    def __init__(self, h: Harness, check_am: bool) -> None:
        self.h, self.check_am = h, check_am
        self.nodes = _fault_nodes(h)
        self.am: dict[str, str] = {}
        """fingerprint -> firing | resolved, as Alertmanager's API showed it"""

    def ours(self) -> dict[str, tuple[str, str]]:
        return {fp: rn for fp, rn in self.h.observed.raised.items() if rn[1] in self.nodes}

    def on_bus(self) -> set[str]:
        return set(self.ours()) & self.h.observed.resolved

    async def poll(self) -> None:
        from gpuaware.alerting import FINGERPRINT_LABEL

        if not self.check_am or self.h.am is None:
            return
        ours = self.ours()
        with contextlib.suppress(OSError, ValueError):
            listed = {a["labels"].get(FINGERPRINT_LABEL, ""): a for a in await asyncio.to_thread(self.h.am.alerts)}
            now = datetime.now(UTC)
            for fp in ours:
                a = listed.get(fp)
                if a is not None and a["status"]["state"] == "active" and _ends(a) > now:
                    self.am[fp] = "firing"
                elif self.am.get(fp) == "firing" and (a is None or _ends(a) <= now):
                    self.am[fp] = "resolved"  # Alertmanager was told it ended (it lists no resolved alert)
        if self.h.notified is not None:
            for fp in ours:
                notes = self.h.notified.statuses(fp)
                if "firing" in notes and "resolved" in notes[notes.index("firing"):]:
                    self.am[fp] = "resolved"
                elif "firing" in notes:
                    self.am.setdefault(fp, "firing")

    def done(self) -> bool:
        both = self.on_bus()
        return bool(both) and (not self.check_am or self.h.am is None
                               or any(self.am.get(fp) == "resolved" for fp in both))

    def summary(self) -> dict[str, Any]:
        ours, both = self.ours(), self.on_bus()
        through = [fp for fp in both if self.am.get(fp) == "resolved"]
        rule_of = {fp: rn[0] for fp, rn in ours.items()}
        return {"faulted_nodes": sorted(self.nodes),
                "raised": sorted({rule_of[fp] for fp in ours}),
                "resolved": sorted({rule_of[fp] for fp in both}),
                "rule": rule_of[through[0]] if through else (rule_of[next(iter(both))] if both else ""),
                "bus": "raised then resolved" if both else ("raised" if ours else "not raised"),
                "alertmanager": ("not checked" if not self.check_am or self.h.am is None else
                                 "firing then resolved" if through else
                                 "firing" if self.am else "not seen"),
                "alertmanager_notified": (self.h.notified.statuses(through[0])
                                          if through and self.h.notified is not None else [])}


async def _watch(h: Harness) -> None:
    """Until every check holds (or the deadline): pods decided/bound/recorded, the injected fault's
    alert raised and resolved (on the bus, and in Alertmanager), every panel with rows."""
    obs, s = h.observed, h.summary
    recorder = _renders(h, "recorder")
    bridge = _renders(h, "alert_bridge")
    if not recorder:
        s.missing.append("pods recorded in placement_events: the chart renders no recorder workload")
    if not bridge:
        s.missing.append("the fault's alert in Alertmanager: the chart renders no alert-bridge workload")
    elif h.am is None:
        s.missing.append("the fault's alert in Alertmanager: prometheus-alertmanager is not installed "
                         "(make tools installs it when run as root)")
    alerts = AlertWatch(h, check_am=bridge)
    recorded: set[str] = set()
    panels: list[dict[str, Any]] = []
    while True:
        obs.changed.clear()
        arrived = obs.expected()
        done_loop = bool(arrived) and arrived <= obs.decided and arrived <= obs.bound
        if recorder:
            with contextlib.suppress(Exception):
                recorded = await _recorded(h)
        done_recorded = not recorder or (bool(arrived) and arrived <= recorded)
        await alerts.poll()
        for milestone, reached in (("every pod decided and bound", done_loop),
                                   ("every pod recorded", recorder and done_recorded),
                                   ("fault alert resolved on the bus", bool(alerts.on_bus())),
                                   ("fault alert resolved in Alertmanager", alerts.done() and alerts.check_am
                                    and h.am is not None)):
            if reached:
                s.mark(milestone)
        if done_loop and done_recorded and alerts.done():
            panels = await _panels(h)
            if all(p.get("rows") for p in panels if recorder or "placement_events" not in p["reads"]):
                s.mark("every panel with rows")
                break
        _check_alive(h.running)
        if time.monotonic() > h.deadline:
            panels = await _panels(h)
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(obs.changed.wait(), 1.0)
    arrived = obs.expected()
    s.pods = {"arrived": len(arrived), "elastic_workers_not_placed": len(set(obs.pending) - arrived),
              "decided": len(arrived & obs.decided), "bound": len(arrived & obs.bound),
              "recorded": len(arrived & recorded), "with_unschedulable_verdicts": len(obs.unschedulable)}
    s.alert = alerts.summary()
    s.panels = panels
    s.messages = dict(sorted(obs.messages.items()))
    if not arrived:
        s.failures.append("no pod arrived (binder.pod.pending)")
    for what in ("decided", "bound") + (("recorded",) if recorder else ()):
        if s.pods[what] < len(arrived):
            s.failures.append(f"{len(arrived) - s.pods[what]} of {len(arrived)} pods not {what}")
    if s.alert["bus"] != "raised then resolved":
        s.failures.append(f"the injected faults' alerts on the bus: {s.alert['bus']}")
    if s.alert["alertmanager"] not in ("firing then resolved", "not checked"):
        s.failures.append(f"the injected faults' alerts in Alertmanager: {s.alert['alertmanager']}")
    for p in panels:
        if not p.get("rows") and (recorder or "placement_events" not in p["reads"]):
            s.failures.append(f"panel without rows: {p['dashboard']} / {p['title']}")
    if not recorder:
        s.missing.append("panels reading placement_events: nothing the chart deploys writes them yet")


def _plays_the_world(pod: PodProcess) -> bool:
    """The pod whose digital twin is the cluster (the binder with ``world: twin``): its clock starts with
    the process, so it starts once every other service is ready, as real nodes exist before a chart is
    installed (the demo orders it so too)."""
    return any(k.endswith("_WORLD") and v == "twin" for k, v in pod.env.items())


async def run_chart(work: Path, *, budget_s: float = 150.0) -> ChartRun:
    """Render, start, replay, check (module docstring); the processes and servers are stopped at the
    end whatever happened. A failure to run is a failure of the summary, not an exception."""
    h = Harness(work, budget_s)
    try:
        pods = h.plan(nodes=[])
        h.start_servers(pods)
        h.summary.mark("servers up")
        for pod in [p for p in pods if p.kind == "Job"]:
            await h.run_job(pod)
        h.summary.mark("provisioned")
        await h.connect_admin()
        services = [p for p in pods if p.kind == "Deployment"]
        worlds = [p for p in services if _plays_the_world(p)]
        await asyncio.gather(*(h.start_pod(p) for p in services if p not in worlds))
        h.summary.mark("services ready")
        await asyncio.gather(*(h.start_pod(p) for p in worlds))
        nodes = await h.world_nodes()
        h.summary.mark("world ready")
        await asyncio.gather(*(h.start_pod(p) for p in h.plan(nodes) if p.kind == "DaemonSet"))
        h.summary.mark("agents ready")
        await _watch(h)
    except (ChartRunError, StackError) as exc:
        h.summary.failures.append(str(exc))
    finally:
        if h.nc is not None:
            with contextlib.suppress(Exception):
                await h.nc.close()
        await asyncio.to_thread(h.stop_all)
    return h.summary


def write_results(summary: ChartRun, path: Path = RESULTS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary.as_json(), indent=2, allow_nan=False) + "\n")


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="gpuaware-chart-run-"))
    work.chmod(0o755)
    try:
        summary = asyncio.run(run_chart(work))
    finally:
        keep = os.environ.get("GPUAWARE_CHART_RUN_KEEP")
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(summary.lines()))
    write_results(summary)
    print(f"written: {_rel(RESULTS)}")
    if not summary.ok:
        print("chart run failed", file=sys.stderr)
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
