"""Forecasting keeps the whole cluster's per-GPU window going whatever one node is called and whatever one
forecast's publish does: a dotted node name gets its forecasts, a forecast that cannot be published is
counted and logged while the window's others go out, and a window whose step fails is logged by the
service (never an unobserved task) while the next window closes as usual."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from forecasting_helpers import eventually, forecasting, recorder

from gpuaware import bus
from gpuaware.schemas import name_from_token

pytestmark = pytest.mark.timeout(120)

DOTTED = "ip-10-0-1-2.ec2.internal"
SERVICE_LOG = "gpuaware.services.forecasting.service"


class Records(logging.Handler):
    """What the service's own logger wrote (whatever handlers ``run_service`` set up around it)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def service_log() -> Iterator[list[logging.LogRecord]]:
    handler, logger = Records(), logging.getLogger(SERVICE_LOG)
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


async def test_a_dotted_node_in_a_dotted_cluster_gets_its_forecasts(nats_proc, fresh_database_url: str,
                                                                    cluster: str) -> None:
    cluster = f"{cluster}.eu-west-1"
    async with recorder(nats_proc.url, cluster) as rec, forecasting(nats_proc.url, fresh_database_url, cluster) as svc:
        seen: list[str] = []

        async def on(msg: Any) -> None:
            seen.append(msg.subject)

        sub = await rec.nc.subscribe("forecast.gpu.predicted.v1.*.*", cb=on)
        for minute in range(3):
            await rec.rollup(DOTTED, minute, [10.0 + minute, 50.0])
            await rec.rollup("node-b", minute, [20.0])
        await eventually(lambda: {ev.node for ev in rec.gpu} == {DOTTED, "node-b"} and len(rec.gpu) >= 6,
                         what="three windows of forecasts for both nodes")
        await sub.unsubscribe()
        mine = [ev for ev in rec.gpu if ev.node == DOTTED]
        assert {g.gpu_uuid for g in mine[-1].gpus} == {f"GPU-{DOTTED}-0", f"GPU-{DOTTED}-1"}
        # routed on one token each: the subject's tokens give the cluster and node back
        routed = {(name_from_token(s.split(".")[4]), name_from_token(s.split(".")[5])) for s in seen}
        assert (cluster, DOTTED) in routed and (cluster, "node-b") in routed
        assert (svc.stats().publish_failures, svc.stats().window_failures) == (0, 0)


async def test_a_forecast_that_cannot_be_published_leaves_the_windows_others(
        nats_proc, fresh_database_url: str, cluster: str, monkeypatch: pytest.MonkeyPatch,
        service_log: list[logging.LogRecord]) -> None:
    real = bus.publish

    async def refusing(js: Any, channel: bus.Channel[Any], msg: Any, **kw: Any) -> Any:
        if channel.subject.startswith("forecast.gpu.predicted.v1.") and channel.subject.endswith(".node-bad"):
            raise bus.TransientError("refused by the test")
        return await real(js, channel, msg, **kw)

    monkeypatch.setattr(bus, "publish", refusing)
    async with recorder(nats_proc.url, cluster) as rec, forecasting(nats_proc.url, fresh_database_url, cluster) as svc:
        for minute in range(2):
            await rec.rollup("node-bad", minute, [10.0])
            await rec.rollup("node-b", minute, [20.0])
        await eventually(lambda: sum(ev.node == "node-b" for ev in rec.gpu) >= 2 and svc.stats().publish_failures >= 2,
                         what="node-b's forecasts of both windows, node-bad's refused")
        assert all(ev.node == "node-b" for ev in rec.gpu)
        assert svc.stats().window_failures == 0
    assert any(r.levelno == logging.WARNING and "forecasts not published" in r.getMessage()
               and "node-bad" in r.getMessage() for r in service_log)


async def test_a_failing_window_is_logged_by_the_service_and_the_next_closes(
        nats_proc, fresh_database_url: str, cluster: str, service_log: list[logging.LogRecord]) -> None:
    async with recorder(nats_proc.url, cluster) as rec, forecasting(nats_proc.url, fresh_database_url, cluster) as svc:
        server = svc.server
        step = server.step
        failures = iter([ValueError("a bad series")])

        def failing_once(*args: Any, **kw: Any) -> Any:
            exc = next(failures, None)
            if exc is not None:
                raise exc
            return step(*args, **kw)

        server.step = failing_once  # type: ignore[method-assign]  # the test's fault, for one window
        await rec.rollup("node-a", 0, [10.0])  # the only window: its timer closes it, and its step fails
        await eventually(lambda: svc.stats().window_failures == 1, what="the failed window counted")
        await rec.rollup("node-a", 1, [20.0])
        await eventually(lambda: len(rec.gpu) >= 1, what="the next window's forecast")
        assert rec.gpu[0].gpus[0].values[0][0] == 20.0
    failed = [r for r in service_log if r.levelno == logging.ERROR]
    assert failed and "forecast window" in failed[0].getMessage() and "a bad series" in failed[0].getMessage()
