"""Supervised loops: restarted after an exception or a return, with a bounded back-off; a loop that
keeps failing stops its service non-zero; a configuration reload that fails is counted and alerted."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from gpuaware import bus
from gpuaware.runtime import (
    RELOAD_RULE,
    ReloadAlarm,
    ServiceContext,
    ServiceSettings,
    Supervisor,
    TaskGaveUp,
    run_service,
    supervise,
)
from gpuaware.runtime.supervision import install, uninstall
from gpuaware.schemas import AlertRaised, AlertResolved

HERE = Path(__file__).parent
CEILING = 20.0  # generous: the waits below are on conditions, never on time


async def until(predicate, what: str) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.005)
    try:
        await asyncio.wait_for(poll(), CEILING)
    except TimeoutError:
        raise AssertionError(f"not reached within {CEILING:g} s: {what}") from None


async def test_a_loop_that_raises_is_restarted_and_counted() -> None:
    sup = Supervisor(base_delay_s=0.0, max_delay_s=0.0)
    runs: list[int] = []
    forever = asyncio.Event()

    async def loop() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise RuntimeError("injected")
        await forever.wait()

    task = sup.start("loop", loop)
    await until(lambda: len(runs) == 2, "the loop's second run")
    assert not task.done()
    assert sup.restarts["loop"] == 1
    samples = {(s.name, s.labels["task"]): s.value for s in sup.samples()}
    assert samples == {("gpuaware_task_restarts", "loop"): 1.0}
    task.cancel()  # cancelling the supervising task ends the loop: no restart
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sup.restarts["loop"] == 1 and len(runs) == 2


async def test_back_off_doubles_and_is_capped() -> None:
    sup = Supervisor(base_delay_s=0.001, max_delay_s=0.004, max_failures=100, window_s=3600)
    failures = 0

    async def loop() -> None:
        nonlocal failures
        failures += 1
        raise ValueError(f"failure {failures}")

    task = sup.start("flaky", loop)
    await until(lambda: len(sup.delays["flaky"]) >= 6, "six restarts")
    task.cancel()
    # 0.001 * 2**n: 0.001, 0.002, 0.004, then the cap
    assert sup.delays["flaky"][:6] == [0.001, 0.002, 0.004, 0.004, 0.004, 0.004]


async def test_a_loop_that_returns_failed_unless_it_was_told_to_end() -> None:
    sup = Supervisor(base_delay_s=0.0, max_delay_s=0.0)
    runs = 0
    stop = asyncio.Event()

    async def loop() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            return  # nobody asked: a failure
        await stop.wait()

    task = sup.start("returns", loop, until=stop.is_set)
    await until(lambda: runs == 2, "the returned loop's restart")
    assert sup.restarts["returns"] == 1
    stop.set()  # now it ends because it was told to: not restarted
    await asyncio.wait_for(task, CEILING)
    assert sup.restarts["returns"] == 1 and runs == 2 and task.exception() is None


async def test_a_standalone_supervisor_gives_up_with_the_last_exception() -> None:
    sup = Supervisor(base_delay_s=0.0, max_delay_s=0.0, max_failures=3, window_s=3600)

    async def loop() -> None:
        raise KeyError("always")

    task = sup.start("doomed", loop)
    with pytest.raises(KeyError, match="always"):
        await asyncio.wait_for(task, CEILING)
    assert sup.restarts["doomed"] == 2  # three failures: two restarts, then it gave up
    assert isinstance(sup.failure, TaskGaveUp) and sup.failure.task == "doomed" and sup.gave_up.is_set()


async def test_supervise_uses_the_installed_supervisor() -> None:
    sup = Supervisor()
    token = install(sup)
    try:
        task = supervise("installed", asyncio.Event().wait)
    finally:
        uninstall(token)
    assert sup.tasks == {"installed": task}
    await sup.stop()
    assert task.cancelled()


async def test_a_service_whose_loop_keeps_failing_drains_and_raises(nats_url: str) -> None:
    settings = ServiceSettings(nats_url=nats_url, service_name="doomed-test", instance_id="doomed-1")
    other_stopped = asyncio.Event()

    class Other:
        async def stop(self) -> None:
            other_stopped.set()

    async def mount(ctx: ServiceContext) -> None:
        async def doomed() -> None:
            raise RuntimeError("injected")
        ctx.on_stop(Other())
        ctx.supervise("doomed loop", doomed)

    sup = Supervisor(base_delay_s=0.0, max_delay_s=0.0, max_failures=3)
    with pytest.raises(TaskGaveUp, match="'doomed loop' failed 3 times"):
        await asyncio.wait_for(run_service(settings, version="0.0.1", mount=mount, stop=asyncio.Event(),
                                           streams=(), supervisor=sup), CEILING)
    assert other_stopped.is_set()  # it drained before it raised


def test_the_process_exits_non_zero_when_a_loop_keeps_failing(nats_url: str) -> None:
    env = {**os.environ, "NATS_URL": nats_url, "GPUAWARE_ECHO_INSTANCE_ID": "echo-doomed",
           "GPUAWARE_ECHO_DOOMED_LOOP": "true", "PYTHONPATH": str(HERE)}
    proc = subprocess.run([sys.executable, str(HERE / "echo_service.py")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0
    logs = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert any("echo doomed loop" in e["msg"] and "failed 3 times" in e["msg"] for e in logs), proc.stderr[-2000:]
    assert any(e["msg"] == "echo draining" for e in logs)


async def test_a_failed_reload_is_counted_alerted_and_resolved(nats_url: str) -> None:
    async with bus.connected(nats_url, name="reload-test") as nc:
        js = nc.jetstream()
        got: list[AlertRaised | AlertResolved] = []

        async def on(msg) -> None:
            got.append(msgspec.json.decode(msg.data, type=AlertRaised | AlertResolved))

        sub = await nc.subscribe("alerts.gpu.>", cb=on)
        await nc.flush()
        alarm = ReloadAlarm(js, config="quota tree", service="quota", cluster="reload-test", source="quota/q1")

        async def broken() -> int:
            raise OSError("disk on fire")

        async def fine() -> int:
            return 7

        assert await alarm.guard(broken) is None
        await alarm.settle()
        assert alarm.failing and alarm.failures == 1 and alarm.last_error == "OSError: disk on fire"
        assert await alarm.guard(fine) == 7
        await alarm.settle()
        await until(lambda: len(got) == 2, "the raised and the resolved alert")
        await sub.unsubscribe()
    raised, resolved = got
    assert isinstance(raised, AlertRaised) and raised.rule == RELOAD_RULE
    assert raised.labels == {"cluster": "reload-test", "service": "quota", "config": "quota tree"}
    assert "disk on fire" in raised.summary
    assert isinstance(resolved, AlertResolved) and resolved.fingerprint == raised.fingerprint
    values = {s.name: s.value for s in alarm.samples()}
    assert values == {"gpuaware_config_reload_failures": 1.0, "gpuaware_config_reload_failing": 0.0}
