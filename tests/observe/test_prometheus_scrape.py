"""A real Prometheus scrapes every gpuaware service: each service runs as its own process (as in
production: `python -m gpuaware.services.<name>`) against real NATS and PostgreSQL with its metrics
port set; Prometheus (Debian's `prometheus` package) is pointed at them; every target comes up and the
services' own series arrive with their labels."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from gpuaware.cli.processes import ProcessGroup, service_command
from gpuaware.devstack.ports import free_port

PROMETHEUS = shutil.which("prometheus")
pytestmark = [pytest.mark.timeout(180), pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus not installed (Debian's `prometheus` package; `make test` installs it "
                               "when it runs as root with apt-get)")]

#: (process name, module args, settings prefix, extra settings, a series only that service serves)
SERVICES = [
    ("placement", ["gpuaware.services.placement"], "GPUAWARE_PLACEMENT_",
     {"WORLD_SNAPSHOT": "false"}, "gpuaware_placement_leader"),
    ("binder", ["gpuaware.services.binder"], "GPUAWARE_BINDER_", {"TWIN_DEFAULT_NODES": "2"},
     "gpuaware_binder_binds_total"),
    ("telemetry-collector", ["gpuaware.services.telemetry", "collector"], "GPUAWARE_TELEMETRY_COLLECTOR_", {},
     "gpuaware_telemetry_samples_ingested_total"),
    ("telemetry-agent", ["gpuaware.services.telemetry", "agent"], "GPUAWARE_TELEMETRY_AGENT_",
     {"BACKEND": "simulated", "SIM_NODES": "1"}, "gpuaware_telemetry_agent_rows_total"),
    ("health-scoring", ["gpuaware.services.health_scoring"], "GPUAWARE_HEALTH_SCORING_", {},
     "gpuaware_health_gpus"),
    ("quota", ["gpuaware.services.quota"], "GPUAWARE_QUOTA_", {}, "gpuaware_quota_trees_refused_total"),
    ("forecasting", ["gpuaware.services.forecasting"], "GPUAWARE_FORECASTING_", {},
     "gpuaware_forecast_model_served"),
]


def _get(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url, timeout=5).read())


def test_prometheus_scrapes_every_service(tmp_path: Path, nats_proc, fresh_database_url: str) -> None:
    cluster = "scrape"
    ports = {name: free_port() for name, *_ in SERVICES}
    with ProcessGroup() as procs:
        for name, module, prefix, extra, _ in SERVICES:
            env = {"NATS_URL": nats_proc.url, "DATABASE_URL": fresh_database_url, f"{prefix}CLUSTER": cluster,
                   f"{prefix}METRICS_PORT": str(ports[name]), f"{prefix}LOG_FORMAT": "console",
                   **{prefix + k: v for k, v in extra.items()}}
            procs.start(name, service_command(*module), env, tmp_path / f"{name}.log")
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
            + "".join(f"  - job_name: {name}\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
                      for name, port in ports.items()))
        web = free_port()
        prom = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{web}"],
                                stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("wb"))
        try:
            api = f"http://127.0.0.1:{web}/api/v1"
            deadline = time.monotonic() + 120
            health: dict[str, str] = {}
            while time.monotonic() < deadline:
                dead = procs.dead()
                assert not dead, f"{dead[0].name} exited:\n{dead[0].log_tail()}"
                try:
                    targets = _get(f"{api}/targets")["data"]["activeTargets"]
                    health = {t["labels"]["job"]: t["health"] for t in targets}
                except OSError:
                    health = {}
                if len(health) == len(SERVICES) and set(health.values()) == {"up"}:
                    break
                time.sleep(1.0)
            assert health and set(health.values()) == {"up"}, health
            time.sleep(2.5)  # a couple of scrapes more

            def query(q: str) -> list[dict]:
                return _get(f"{api}/query?query={urllib.parse.quote(q)}")["data"]["result"]

            info = {r["metric"]["service"]: r["metric"] for r in query("gpuaware_service_info")}
            assert set(info) == {"placement", "binder", "telemetry-collector", "telemetry-agent", "health-scoring",
                                 "quota", "forecasting"}, info
            assert all(m["cluster"] == cluster for m in info.values())
            for name, *_, series in SERVICES:
                got = query(series)
                assert got, f"{name}: no {series}"
                assert {r["metric"]["job"] for r in got} == {name}, (series, got)
            # a durable consumer's lag and dead letters, as the alert rules read them
            assert query('gpuaware_bus_consumer_lag_messages{service="binder"}')
        finally:
            prom.terminate()
            prom.wait(10)
