"""One OpenTelemetry trace per pod, pending to bound, across placement and the binder, exported over OTLP:
both services run as processes with ``OTEL_EXPORTER=otlp`` pointed at an OTLP/HTTP receiver in this test
(the protobuf ``ExportTraceServiceRequest`` a collector receives); the binder's digital twin submits pods,
placement decides them, the binder binds them. Every bound pod's events are one connected trace: the
binder's publish of the pending pod is its root, and placement's processing of it, placement's publish of
the decision, the binder's processing of the decision and its publish of the binding are its descendants."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from gpuaware.cli.processes import ProcessGroup, service_command
from gpuaware.devstack.ports import free_port

pytestmark = pytest.mark.timeout(150)


class Receiver:
    """The part of an OpenTelemetry collector this test needs: POST /v1/traces, spans kept by trace."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []

    async def traces(self, request: web.Request) -> web.Response:
        req = ExportTraceServiceRequest()
        req.ParseFromString(await request.read())
        for rs in req.resource_spans:
            attrs = {a.key: a.value.string_value for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append({"service": attrs.get("service.name"), "name": s.name,
                                       "trace": s.trace_id.hex(), "span": s.span_id.hex(),
                                       "parent": s.parent_span_id.hex()})
        return web.Response(content_type="application/x-protobuf", body=b"")


async def test_one_connected_trace_per_pod_over_otlp(tmp_path: Path, nats_proc) -> None:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver.traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    otlp = free_port()
    await web.TCPSite(runner, "127.0.0.1", otlp).start()
    cluster = "traced"
    common = {"NATS_URL": nats_proc.url, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp}",
              "OTEL_BSP_SCHEDULE_DELAY": "200"}
    try:
        with ProcessGroup() as procs:
            procs.start("placement", service_command("gpuaware.services.placement"), {
                **common, "GPUAWARE_PLACEMENT_CLUSTER": cluster, "GPUAWARE_PLACEMENT_OTEL_EXPORTER": "otlp",
                "GPUAWARE_PLACEMENT_WORLD_RETRY_S": "0.25", "GPUAWARE_PLACEMENT_LOG_FORMAT": "console"},
                tmp_path / "placement.log")
            await asyncio.sleep(3.0)  # placement leads before the first pod
            procs.start("binder", service_command("gpuaware.services.binder"), {
                **common, "GPUAWARE_BINDER_CLUSTER": cluster, "GPUAWARE_BINDER_OTEL_EXPORTER": "otlp",
                "GPUAWARE_BINDER_TWIN_DEFAULT_NODES": "4", "GPUAWARE_BINDER_MAX_PODS": "12",
                "GPUAWARE_BINDER_WINDOW_S": "7200", "GPUAWARE_BINDER_SPEED": "600",
                "GPUAWARE_BINDER_LOG_FORMAT": "console"}, tmp_path / "binder.log")

            def bound_traces() -> dict[str, list[dict[str, Any]]]:
                by_trace: dict[str, list[dict[str, Any]]] = defaultdict(list)
                for s in receiver.spans:
                    by_trace[s["trace"]].append(s)
                return {t: spans for t, spans in by_trace.items()
                        if any(s["name"].startswith("publish binder.pod.bound") for s in spans)}

            deadline = time.monotonic() + 90
            while len(bound_traces()) < 5:
                dead = procs.dead()
                assert not dead, f"{dead[0].name} exited:\n{dead[0].log_tail()}"
                assert time.monotonic() < deadline, (len(receiver.spans), {s["name"] for s in receiver.spans})
                await asyncio.sleep(0.5)
            # SIGTERM: each service flushes what its batch processor holds, to the receiver on this loop
            # (so the loop must keep serving while they stop)
            await asyncio.to_thread(procs.stop)
    finally:
        await runner.cleanup()
    traces = bound_traces()
    for trace_id, spans in traces.items():
        names = {(s["service"], s["name"].split(".v1")[0]) for s in spans}
        assert {("binder", "publish binder.pod.pending"), ("placement", "process binder.pod.pending"),
                ("placement", "publish placement.pod.decided"), ("binder", "process placement.pod.decided"),
                ("binder", "publish binder.pod.bound")} <= names, (trace_id, sorted(names))
        roots = [s for s in spans if not s["parent"].strip("0")]
        assert [r["name"].split(".v1")[0] for r in roots] == ["publish binder.pod.pending"], (trace_id, roots)
        ids = {s["span"] for s in spans}
        assert all(s["parent"] in ids for s in spans if s not in roots), f"{trace_id}: a span's parent is missing"
    pendings = [s for s in receiver.spans if s["name"].startswith("publish binder.pod.pending")]
    assert len({s["trace"] for s in pendings}) == len(pendings)  # one trace per pod, never shared
