"""The life of every gpuaware service process: set up, mount handlers, serve, drain on a signal.

A service's `__main__` stays tiny:

    async def main() -> None:
        settings = PlacementSettings.from_env()
        await run_service(settings, version=__version__, mount=handlers.mount)

`run_service` configures structured logging and OpenTelemetry, connects to NATS (reconnecting
forever; as `nats_user` when set), declares the platform's JetStream streams (idempotent; a
least-privilege user may not create or change them, so a refusal is tolerated when the stream
exists with a compatible configuration and stops the service, naming the stream, otherwise: an
admin provisions them, see `provision_streams`), calls `mount(ctx)` so the
service can start its durable consumers, add its Prometheus sources to `ctx.metrics` and return its
request/reply endpoints (the metrics are then served on `metrics_port` when it is set), and registers a
NATS micro service named after the service: `$SRV.PING/INFO/STATS` then report the instance and
each endpoint's request/error counts, with or without endpoints of its own. On SIGTERM/SIGINT (or
`stop.set()`) it stops consumers first (in-flight messages finish and are acked), then the
micro service, then drains the connection, within `drain_timeout_s`.

Every long-running loop a service starts runs under the service's `Supervisor` (`ctx.supervise`, or
`supervise` from the classes `mount` builds): a loop that raises or returns is restarted after a capped
back-off, counted in ``gpuaware_task_restarts_total{task}``; one that keeps failing stops the service,
which drains and then raises `TaskGaveUp` (the process exits non-zero: never a silent dead loop).
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuaware import bus
from gpuaware.runtime.logs import setup_logging
from gpuaware.runtime.metrics import ServiceMetrics
from gpuaware.runtime.settings import ServiceSettings
from gpuaware.runtime.signals import stop_on_signals
from gpuaware.runtime.supervision import Factory, Supervisor, TaskGaveUp, install, uninstall
from gpuaware.runtime.tracing import setup_tracing, shutdown_tracing
from gpuaware.schemas import STREAMS, StreamSpec

log = logging.getLogger(__name__)


class Stoppable(Protocol):
    async def stop(self) -> None: ...


@dataclass
class ServiceContext:
    """What `mount` gets: the settings, the connection, JetStream, and a place to register closers."""

    settings: ServiceSettings
    nc: Any
    js: Any
    instance_id: str
    metrics: ServiceMetrics
    """the process's Prometheus registry: a service adds its sources and histograms in `mount`"""
    closers: list[Stoppable] = field(default_factory=list)
    supervisor: Supervisor = field(default_factory=Supervisor)
    """runs the service's long-running loops (`supervise`)"""

    def on_stop(self, resource: Stoppable) -> Stoppable:
        """Stop `resource` (a consumer, a background task wrapper) first when the service drains."""
        self.closers.append(resource)
        return resource

    def supervise(self, name: str, factory: Factory, *,
                  until: Callable[[], bool] | None = None) -> asyncio.Task[None]:
        """Run the long-running loop ``factory()`` as task ``name`` under the service's supervisor."""
        return self.supervisor.start(name, factory, until=until)


Mount = Callable[[ServiceContext], Awaitable[Sequence[bus.Endpoint] | None]]


def instance_id(settings: ServiceSettings) -> str:
    return settings.instance_id or f"{socket.gethostname()}-{os.getpid()}"


async def run_service(settings: ServiceSettings, *, version: str, mount: Mount,
                      stop: asyncio.Event | None = None, streams: Sequence[StreamSpec] = STREAMS,
                      ready: asyncio.Event | None = None, supervisor: Supervisor | None = None) -> None:
    """Run one service until `stop` is set or a termination signal arrives, then drain; `TaskGaveUp`
    when a supervised loop kept failing (``supervisor``: one with other limits than the defaults)."""
    setup_logging(settings.service_name, settings.log_level, settings.log_format)
    setup_tracing(settings.service_name, settings.otel_exporter, instance_id(settings))
    log.info("starting %s %s", settings.service_name, version, extra={"settings": settings.redacted()})
    options: dict[str, Any] = {}
    if settings.nats_creds:
        options["user_credentials"] = settings.nats_creds
    if settings.nats_user:
        options["user"] = settings.nats_user
        options["password"] = settings.nats_password
    if settings.nats_tls_ca:
        options["tls"] = bus.tls_context(settings.nats_tls_ca)
    async with bus.connected(settings.nats_url.split(","), name=settings.service_name, **options) as nc:
        js = nc.jetstream()
        for spec in streams:
            await declare_stream(js, spec, user=settings.nats_user or "this user")
        iid = instance_id(settings)
        if supervisor is None:
            supervisor = Supervisor()
        if supervisor.on_give_up is None:
            supervisor.on_give_up = _stop_service
        ctx = ServiceContext(settings=settings, nc=nc, js=js, instance_id=iid,
                             metrics=ServiceMetrics(settings.service_name, version, settings.cluster, iid),
                             supervisor=supervisor)
        ctx.metrics.source(supervisor.samples)
        token = install(supervisor)  # what `mount` starts (and the tasks it starts) finds it
        try:
            endpoints = list(await mount(ctx) or [])
            if settings.metrics_port:
                ctx.metrics.serve(settings.metrics_port, settings.metrics_addr)
                ctx.on_stop(ctx.metrics)
            service = await bus.add_service(
                nc, settings.service_name, version, endpoints,
                metadata={"instance": ctx.instance_id, "cluster": settings.cluster})
        except BaseException:
            supervisor.stopping = True
            await _stop_resources(ctx)  # consumers `mount` started must not outlive a failed start
            await supervisor.stop()
            raise
        finally:
            uninstall(token)
        await nc.flush()  # the endpoints' subscriptions are on the server before anyone is told it serves
        log.info("%s serving (%d endpoints)", settings.service_name, len(endpoints))
        # what exists now (modules, settings, the view a service built at start) lives as long as the
        # process: moved out of the collector's reach, a full collection no longer walks it (tens of
        # milliseconds on a loaded service: a latency tail the loop's p99 felt)
        gc.freeze()
        profiler = _profiler(settings.profile_out)
        if ready is not None:
            ready.set()
        if stop is None:
            async with stop_on_signals() as signalled:
                await _first_of(signalled, supervisor.gave_up)
        else:
            await _first_of(stop, supervisor.gave_up)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(settings.profile_out)
        log.info("%s draining", settings.service_name)
        supervisor.stopping = True  # a loop that ends now has ended, not failed
        await _drain(ctx, service, settings.drain_timeout_s)
        await supervisor.stop()
    await asyncio.to_thread(shutdown_tracing)
    if supervisor.failure is not None:
        log.error("%s stopped: %s", settings.service_name, supervisor.failure)
        raise supervisor.failure
    log.info("%s stopped", settings.service_name)


def _stop_service(failure: TaskGaveUp) -> None:
    """A supervised loop kept failing: `run_service` sees ``gave_up`` set, drains and raises ``failure``."""


async def _first_of(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


class StreamsNotProvisioned(RuntimeError):
    """A stream the service needs is missing (or incompatible) and the service may not fix it."""


def _profiler(out: str) -> cProfile.Profile | None:
    """A running profiler when ``out`` names a file (`ServiceSettings.profile_out`)."""
    if not out:
        return None
    profiler = cProfile.Profile()
    profiler.enable()
    return profiler


async def declare_stream(js: Any, spec: StreamSpec, *, user: str = "this user") -> None:
    """`ensure_stream`, tolerating a permission refusal when the stream exists and is compatible."""
    try:
        await bus.ensure_stream(js, spec)
    except bus.StreamPermissionError as exc:
        if exc.info is None:
            raise StreamsNotProvisioned(
                f"stream {spec.name} does not exist and {user} may not create it: provision the streams "
                f"as admin first (`gpuaware up --auth` does; or gpuaware.runtime.provision_streams)") from None
        if not bus.stream_compatible(exc.diff):
            raise StreamsNotProvisioned(
                f"stream {spec.name} is incompatible with the contract ({', '.join(exc.diff)}) and {user} may "
                f"not update it: re-provision the streams as admin") from None
        log.warning("stream %s differs from the contract (%s) but %s may not update it; using it as is",
                    spec.name, ", ".join(exc.diff), user)


async def provision_streams(url: str | Sequence[str], *, user: str = "", password: str = "",
                            streams: Sequence[StreamSpec] = STREAMS, timeout: float = 10.0,
                            tls_ca: str = "") -> list[str]:
    """Create or update the platform's streams as a user allowed to (admin); returns their names.

    What a launcher or a deployment job runs before the services when they use least-privilege users.
    A JetStream that does not answer yet (a NATS cluster still electing its meta leader just after it
    started, as the provisioning Job or the launcher meets it) is asked again with the bus's backoff
    until ``timeout`` seconds have passed since the connection; then the timeout is raised.
    """
    options: dict[str, Any] = {"user": user, "password": password} if user else {}
    if tls_ca:
        options["tls"] = bus.tls_context(tls_ca)
    retry = bus.RetryPolicy(base=0.25, cap=2.0)
    async with bus.connected(url, name="gpuaware-provision", initial_timeout=timeout, **options) as nc:
        js = nc.jetstream()
        deadline = asyncio.get_running_loop().time() + timeout
        for spec in streams:
            failures = 0
            while True:
                try:
                    await bus.ensure_stream(js, spec)
                    break
                except TimeoutError:
                    failures += 1
                    delay = retry.delay(failures)
                    if asyncio.get_running_loop().time() + delay > deadline:
                        raise
                    log.info("stream %s: JetStream did not answer (try %d); asking again in %.2fs", spec.name,
                             failures, delay)
                    await asyncio.sleep(delay)
    return [s.name for s in streams]


async def _stop_resources(ctx: ServiceContext) -> None:
    for resource in reversed(ctx.closers):
        try:
            await resource.stop()
        except Exception:
            log.exception("stopping %r failed", resource)


async def _drain(ctx: ServiceContext, service: Any, timeout: float) -> None:
    async def stop_all() -> None:
        await _stop_resources(ctx)
        await service.stop()

    try:
        await asyncio.wait_for(stop_all(), timeout)
    except TimeoutError:
        log.warning("drain took longer than %.1fs; closing anyway", timeout)
