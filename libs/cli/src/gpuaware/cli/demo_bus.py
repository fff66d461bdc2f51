"""The demo's requests and housekeeping over NATS: the channels it follows, the streams and consumers
it clears between runs, the binder's world snapshot, placement's explanations, the operator's
repair, waiting for a service to answer, and for the recorder to have stored what the run published."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from gpuaware import bus
from gpuaware.cli.demo_config import SOURCE, VIRTUAL_EPOCH, Interrupted
from gpuaware.cli.demo_record import RunLog
from gpuaware.cli.processes import ServiceProcess
from gpuaware.schemas import (
    BINDER,
    FORECASTING,
    HEALTH_CORDON,
    HEALTH_SCORING,
    OPERATIONAL_ENDPOINTS,
    PLACEMENT,
    PLACEMENT_EXPLAIN,
    STREAMS,
    WORLD_SNAPSHOT,
    CordonAction,
    CordonReply,
    CordonRequest,
    ExplainReply,
    ExplainRequest,
    WorldSnapshotReply,
    WorldSnapshotRequest,
    recorder_durable,
    subject_token,
)

__all__ = ["FORECASTING_STATS", "HEALTH_STATS",
           "delete_loop_streams", "delete_run_consumers", "explain_pending", "forecast_effect", "operator_repair",
           "recorder_caught_up", "snapshot_violations", "wait_for", "world_snapshot"]

log = logging.getLogger(__name__)


HEALTH_STATS = OPERATIONAL_ENDPOINTS[HEALTH_SCORING][0]
"""health-scoring's counters (an operational endpoint, outside the contract's registry)"""
FORECASTING_STATS = OPERATIONAL_ENDPOINTS[FORECASTING][0]


async def delete_loop_streams(js: bus.JetStream, *, ours: bool = True) -> None:
    """Drop the BINDER and PLACEMENT streams (the previous run's events and duplicate windows) when
    the server is the demo's own; on somebody else's (``NATS_URL``) they are only ensured: each run
    has its own cluster name, so another run's events are never read as this one's."""
    for spec in (BINDER, PLACEMENT):
        if ours:
            with contextlib.suppress(Exception):
                await js.delete_stream(spec.name)
        await bus.ensure_stream(js, spec)


async def delete_run_consumers(js: bus.JetStream, cluster: str) -> list[str]:
    """The durable consumers the run's services made (their names carry its cluster's token): deleted after
    the run, so no consumer with pending messages is left on the server. Returns ``stream/name``."""
    gone = []
    for spec in STREAMS:
        try:
            infos = await js.consumers_info(spec.name)
        except Exception:
            continue
        for info in infos:
            name = info.name or ""
            if subject_token(cluster) in name and info.config.durable_name:
                with contextlib.suppress(Exception):
                    await js.delete_consumer(spec.name, name)
                    gone.append(f"{spec.name}/{name}")
    return gone


async def world_snapshot(nc: bus.Client, cluster: str, *, nodes: bool, pods: bool,
                         timeout: float = 5.0) -> list[WorldSnapshotReply]:
    """Every page of the binder's world (empty list when nobody answers)."""
    pages: list[WorldSnapshotReply] = []
    node_off: int | None = 0 if nodes else None
    pod_off: int | None = 0 if pods else None
    first = True
    while first or node_off is not None or pod_off is not None:
        first = False
        req = WorldSnapshotRequest(source=SOURCE, emitted_at=time.time(), cluster=cluster,
                                   include_nodes=node_off is not None, include_pods=pod_off is not None,
                                   node_offset=node_off or 0, pod_offset=pod_off or 0, limit=1000 if nodes or pods else 1)
        page = await bus.request(nc, WORLD_SNAPSHOT, req, WorldSnapshotReply, timeout=timeout)
        pages.append(page)
        node_off = page.next_node_offset if req.include_nodes else None
        pod_off = page.next_pod_offset if req.include_pods else None
    return pages


def snapshot_violations(pages: list[WorldSnapshotReply], gpus: dict[str, int]) -> tuple[list[str], int]:
    """GPUs whose bound slices, summed, exceed the GPU (compute or memory) in the world's own view."""
    milli: Counter[str] = Counter()
    mem: Counter[str] = Counter()
    pods = 0
    for page in pages:
        for p in page.pods:
            pods += 1
            for s in p.slices:
                milli[s.gpu_uuid] += s.gpu_milli
                mem[s.gpu_uuid] += s.memory_mib
    bad = [f"{g}: {milli[g]} milli, {mem[g]} MiB" for g in milli
           if milli[g] > 1000 or (gpus.get(g, 0) and mem[g] > gpus[g])]
    return bad, pods


async def explain_pending(nc: bus.Client, cluster: str, log_: RunLog, limit: int, *, at_once: int = 16) -> None:
    """Ask placement why each pending pod without a verdict for its latest attempt still waits (up to
    ``limit`` pods, ``at_once`` questions in flight: a busy trace leaves thousands waiting)."""
    uids = [uid for uid, (state, reason) in log_.accounting().items() if state == "pending" and not reason][:limit]
    gone = asyncio.Event()  # placement stopped answering: stop asking
    slots = asyncio.Semaphore(at_once)

    async def ask(uid: str) -> None:
        if gone.is_set():
            return
        req = ExplainRequest(source=SOURCE, emitted_at=time.time(), cluster=cluster, pod_uid=uid, ask_quota=False,
                             max_node_classes=5)
        async with slots:
            try:
                reply = await bus.request(nc, PLACEMENT_EXPLAIN, req, ExplainReply, timeout=2.0)
                log_.explained[uid] = reply.explanation.summary
            except bus.ServiceError as exc:
                log_.explained[uid] = f"placement: {exc}"
            except (bus.RequestTimeout, bus.NoResponders):
                gone.set()

    await asyncio.gather(*(ask(uid) for uid in uids))


async def recorder_caught_up(js: bus.JetStream, cluster: str) -> bool | None:
    """True once the recorder's durables on BINDER and PLACEMENT have nothing left to deliver and nothing
    delivered but unacknowledged: it acknowledges a message only after its row committed, so every event
    the streams hold is in ``placement_events``. None while not yet (``wait_for``'s "no answer")."""
    for spec in (BINDER, PLACEMENT):
        info = await js.consumer_info(spec.name, recorder_durable(cluster))
        if info.num_pending or info.num_ack_pending:
            return None
    return True


async def wait_for(check: Callable[[], Awaitable[Any]], *, timeout: float, what: str, procs: list[ServiceProcess],
                   interval: float = 0.2, stop: asyncio.Event | None = None) -> Any:
    """Poll ``check`` (async, returns a value or None/raises) until it answers; fail fast when a
    process died."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Exception | None = None
    while loop.time() < deadline:
        if stop is not None and stop.is_set():
            raise Interrupted(what)
        for p in procs:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited ({p.proc.returncode if p.proc else '?'}) while waiting for "
                                   f"{what}; its log ({p.log_path}):\n{p.log_tail()}")
        try:
            value = await check()
            if value is not None:
                return value
        except Exception as exc:
            last = exc
        await asyncio.sleep(interval)
    raise TimeoutError(f"{what}: no answer within {timeout:.0f}s ({last})")


async def forecast_effect(placements: dict[str, Any], ports: dict[str, int]) -> dict[str, Any]:
    """Placement's forecast counters, read from the metrics of every instance still running (a
    killed leader's counts went with it)."""
    from gpuaware.cli.demo_forecast import placement_forecast_effect

    def scrape(port: int) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            return reply.read().decode()

    texts = []
    for inst, proc in placements.items():
        if proc.alive():
            try:
                texts.append(await asyncio.to_thread(scrape, ports[inst]))
            except OSError as exc:
                log.warning("placement %s metrics unreadable: %s", inst, exc)
    return placement_forecast_effect(texts)


async def operator_repair(nc: bus.Client, cluster: str, gpu: str, node: str, virtual_now: float) -> dict[str, Any]:
    """What an operator does after the catalogue's REBOOT_NODE for XID 79: the node was rebooted and the
    GPU re-validated, so it goes back to work with its error history cleared (``gpuaware health uncordon
    GPU --clear``)."""
    req = CordonRequest(source=SOURCE, emitted_at=time.time(), cluster=cluster, gpu_uuid=gpu,
                        action=CordonAction.UNCORDON, clear=True, by="demo-operator",
                        reason=f"node {node} rebooted after XID 79 (the catalogue's REBOOT_NODE); GPU re-validated")
    out: dict[str, Any] = {"gpu_uuid": gpu, "node": node, "requested_at": req.emitted_at,
                           "virtual_h": round((virtual_now - VIRTUAL_EPOCH) / 3600, 3), "reason": req.reason,
                           "by": req.by}
    try:
        reply = await bus.request(nc, HEALTH_CORDON, req, CordonReply, timeout=5.0)
    except (bus.RequestTimeout, bus.NoResponders, bus.ServiceError) as exc:
        return {**out, "error": str(exc)}
    return {**out, "previous": reply.previous.value, "current": reply.current.value, "changed": reply.changed}
