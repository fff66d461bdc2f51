"""Every long-running loop of every service runs supervised, and survives being killed.

Two halves over one registry (``SERVICES``: each service's supervised tasks):

* statically, every ``supervise(...)`` in a service names a task the registry lists, and every bare
  ``create_task`` / ``ensure_future`` left in a service is in ``UNSUPERVISED`` with the reason it may be
  bare (one flush, one request, a takeover that gives its lease up when it fails): a new loop started
  bare, or supervised but not registered, fails here;
* at run time, each service runs in this process (``run_service``, its real mount, real NATS and
  PostgreSQL) under a supervisor that can kill a running loop: the test waits until the service started
  exactly the registered tasks, then kills each one with an injected exception and sees it restarted
  (counted, running again) while the service keeps running, and the service then stops cleanly.
"""

from __future__ import annotations

import ast
import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gpuaware import bus
from gpuaware.runtime import Supervisor, run_service
from gpuaware.runtime import service as runtime_service

REPO = Path(__file__).resolve().parents[2]
CEILING = 60.0  # generous: every wait is on a condition


class Spec(msgspec.Struct, frozen=True):
    folder: str
    """services/<folder>"""
    tasks: tuple[str, ...]
    """the supervised tasks the running service starts (all of them, sorted)"""


SERVICES: dict[str, Spec] = {
    "alert_bridge": Spec("alert_bridge", ("alertmanager resend", "alertmanager sender")),
    "binder": Spec("binder", ("binder world loop",)),
    "forecasting": Spec("forecasting", ("forecasting reload",)),
    "health_scoring": Spec("health_scoring", ("health checkpoints", "health tick")),
    "placement": Spec("placement", ("placement power", "placement report", "placement retry",
                                    "placement world snapshot")),
    "quota": Spec("quota", ("quota report", "quota writer")),
    "recorder": Spec("recorder", ("placement-events-writer",)),
    "telemetry_agent": Spec("telemetry", ("telemetry-agent",)),
    "telemetry_collector": Spec("telemetry", ("sample-writer", "telemetry-in-progress", "telemetry-maintenance")),
}

#: (file under services/, the function whose coroutine the task runs, as ``callee()``) -> why it is not a
#: long-running loop
UNSUPERVISED: dict[tuple[str, str], str] = {
    ("telemetry/src/gpuaware/services/telemetry/handlers.py", "self.load_inventory()"):
        "one inventory read, shared by the deliveries waiting on it",
    ("telemetry/src/gpuaware/services/telemetry/collector.py", "self._flush()"): "one COPY of queued rows",
    ("forecasting/src/gpuaware/services/forecasting/service.py", "self._flush_through()"): "one window's flush",
    ("placement/src/gpuaware/services/placement/durations.py", "self._ask()"): "one request",
    ("placement/src/gpuaware/services/placement/takeover.py", "create()"): "one consumer being created",
    ("placement/src/gpuaware/services/placement/handlers.py", "self._lead()"):
        "a finite takeover; one that fails gives the lease up (_lead_ended), so a standby leads",
    ("quota/src/gpuaware/services/quota/handlers.py", "self._lead()"):
        "a finite takeover; one that fails gives the lease up (_lead_ended), so a standby leads",
    ("quota/src/gpuaware/services/quota/handlers.py", "bus.serve()"): "one endpoint being created",
    ("health_scoring/src/gpuaware/services/health_scoring/handlers.py", "self._lead()"):
        "a finite takeover; one that fails gives the lease up, so a standby leads",
    ("binder/src/gpuaware/services/binder/twin_world.py", "stop.wait()"): "a wait raced inside the world's loop",
    ("binder/src/gpuaware/services/binder/twin_world.py", "self._wake.wait()"): "a wait raced inside the world's loop",
}


def _calls() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """Per service folder, the task names passed to ``supervise``; and every bare task creation."""
    supervised: dict[str, set[str]] = defaultdict(set)
    bare: set[tuple[str, str]] = set()
    for path in sorted((REPO / "services").glob("*/src/**/*.py")):
        rel = path.relative_to(REPO / "services").as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "supervise":
                first = node.args[0] if node.args else None
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), \
                    f"{rel}:{node.lineno}: supervise() needs the task's name as a literal (the registry lists it)"
                supervised[rel.split("/", 1)[0]].add(first.value)
            elif name in ("create_task", "ensure_future") and node.args:
                coro = node.args[0]
                bare.add((rel, f"{ast.unparse(coro.func)}()" if isinstance(coro, ast.Call) else ast.unparse(coro)))
    return supervised, bare


def test_every_loop_is_supervised_and_registered() -> None:
    supervised, bare = _calls()
    registered: dict[str, set[str]] = defaultdict(set)
    for spec in SERVICES.values():
        registered[spec.folder].update(spec.tasks)
    assert dict(supervised) == dict(registered), "a supervised task missing from SERVICES (or gone from its service)"
    unexplained = sorted(bare - set(UNSUPERVISED))
    assert not unexplained, ("bare tasks in services: run a long-running loop through supervise(), or list a "
                             f"short one in UNSUPERVISED with why: {unexplained}")
    assert not sorted(set(UNSUPERVISED) - bare), "UNSUPERVISED lists tasks that no longer exist"


class Injecting(Supervisor):
    """A supervisor whose running loops a test can kill: ``kill(name)`` ends the loop's current run
    with an exception, as if its step had raised."""

    latest: Injecting | None = None

    def __init__(self, **kw: Any) -> None:
        super().__init__(base_delay_s=0.0, max_delay_s=0.0, max_failures=3, window_s=3600)
        self.attempts: Counter[str] = Counter()
        self.running: dict[str, bool] = {}
        self.triggers: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        Injecting.latest = self

    def kill(self, name: str) -> None:
        self.triggers[name].set()

    async def _attempt(self, name: str, factory: Callable[[], Any]) -> None:
        self.attempts[name] += 1
        run = asyncio.ensure_future(factory())
        trigger = self.triggers[name]
        fire = asyncio.ensure_future(trigger.wait())
        self.running[name] = True
        try:
            await asyncio.wait({run, fire}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            run.cancel()
            fire.cancel()
            await asyncio.gather(run, fire, return_exceptions=True)
            raise
        finally:
            self.running[name] = False
        fire.cancel()
        if run.done():
            return run.result()
        trigger.clear()
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        raise RuntimeError(f"injected into {name}")


async def _world(key: str, settings: Any) -> None:
    """What a service needs from the world before all its loops run: placement leads (and so starts its
    retry and power loops) once it knows a node."""
    if key != "placement":
        return
    from service_runner import streams_ready

    from gpuaware.schemas import GpuInfo, NodeInventory

    inv = NodeInventory(source="test", emitted_at=time.time(), cluster=settings.cluster, node="n1", cpu_milli=64_000,
                        memory_mib=262_144, gpus=(GpuInfo(uuid="GPU-n1-0", index=0, model="A100", memory_mib=81920,
                                                          pci_bus_id="00000000:00:00.0"),))
    async with streams_ready(settings.nats_url, "supervision-test") as nc:
        await bus.publish(nc.jetstream(), bus.event_channel(NodeInventory).at(settings.cluster, "n1"), inv)


async def _until(predicate: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + CEILING
    while not predicate():
        assert time.monotonic() < deadline, f"not reached within {CEILING:g} s: {what}"
        await asyncio.sleep(0.02)


def _service(key: str, nats_url: str, database_url: str) -> tuple[Any, Any]:
    """The settings and the mount of ``key``, configured so that every one of its loops runs."""
    base = {"nats_url": nats_url, "cluster": f"sup-{key.replace('_', '-')}", "instance_id": f"{key}-1",
            "log_format": "console", "log_level": "WARNING"}
    db = {**base, "database_url": database_url}
    if key == "alert_bridge":
        from gpuaware.services.alert_bridge.handlers import make_mount
        from gpuaware.services.alert_bridge.settings import AlertBridgeSettings
        return msgspec.convert({**base, "alertmanager_url": "http://127.0.0.1:9"}, AlertBridgeSettings), make_mount()
    if key == "binder":
        from gpuaware.services.binder.handlers import make_mount as binder_mount
        from gpuaware.services.binder.settings import BinderSettings
        return msgspec.convert(base, BinderSettings), binder_mount()
    if key == "forecasting":
        from gpuaware.services.forecasting.handlers import mount as forecasting_mount
        from gpuaware.services.forecasting.settings import ForecastingSettings
        return msgspec.convert({**db, "reload_s": 0.2}, ForecastingSettings), forecasting_mount
    if key == "health_scoring":
        from gpuaware.services.health_scoring.handlers import mount as health_mount
        from gpuaware.services.health_scoring.settings import HealthScoringSettings
        return msgspec.convert({**db, "tick_s": 0.2, "checkpoint_s": 0.2, "poll_s": 0.2}, HealthScoringSettings), \
            health_mount
    if key == "placement":
        from gpuaware.services.placement.handlers import mounter
        from gpuaware.services.placement.settings import PlacementSettings
        return msgspec.convert({**base, "lease_ttl_s": 1.5, "lease_poll_s": 0.1, "world_snapshot": True,
                                "world_retry_s": 0.2, "power_planner": True}, PlacementSettings), mounter()
    if key == "quota":
        from gpuaware.services.quota.handlers import mount as quota_mount
        from gpuaware.services.quota.settings import QuotaSettings
        return msgspec.convert({**db, "report_interval_s": 0.2}, QuotaSettings), quota_mount
    if key == "recorder":
        from gpuaware.services.recorder.handlers import mount as recorder_mount
        from gpuaware.services.recorder.settings import RecorderSettings
        return msgspec.convert(db, RecorderSettings), recorder_mount
    if key == "telemetry_agent":
        from gpuaware.services.telemetry.agent import mount_agent
        from gpuaware.services.telemetry.settings import AgentSettings
        return msgspec.convert({**base, "backend": "simulated"}, AgentSettings), mount_agent
    assert key == "telemetry_collector"
    from gpuaware.services.telemetry.handlers import mount_collector
    from gpuaware.services.telemetry.settings import CollectorSettings
    return msgspec.convert({**db, "tick_s": 0.2}, CollectorSettings), mount_collector


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(SERVICES))
async def test_each_loop_killed_is_restarted_and_the_service_lives(
        key: str, nats_proc: Any, fresh_database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_service, "Supervisor", Injecting)
    Injecting.latest = None
    settings, mount = _service(key, nats_proc.url, fresh_database_url)
    await _world(key, settings)
    expected = SERVICES[key].tasks
    stop, ready = asyncio.Event(), asyncio.Event()
    service = asyncio.create_task(run_service(settings, version="0.0.1", mount=mount, stop=stop, ready=ready))
    try:
        await _until(lambda: ready.is_set() or service.done(), f"{key} started")
        if service.done():
            service.result()  # its start failed: that is the failure
        sup = Injecting.latest
        assert sup is not None
        await _until(lambda: set(sup.tasks) >= set(expected), f"{key} started {expected}")
        assert tuple(sorted(sup.tasks)) == expected, "the service started a supervised task the registry lacks"
        for name in expected:
            await _until(lambda name=name: sup.running.get(name), f"{name} running")
            sup.kill(name)
            await _until(lambda name=name: sup.attempts[name] == 2 and sup.running.get(name),
                         f"{name} restarted after the injected exception")
            assert sup.restarts[name] == 1 and not sup.tasks[name].done()
            assert not service.done(), f"{key} stopped when {name} was killed"
        counted = {s.labels["task"]: s.value for s in sup.samples()}
        assert counted == dict.fromkeys(expected, 1.0)
    finally:
        stop.set()
        await asyncio.wait_for(service, CEILING)  # a clean stop: no TaskGaveUp, nothing left failing
