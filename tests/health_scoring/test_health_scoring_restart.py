"""A restart keeps every GPU's state and the open alerts: no state flips, nothing re-raised, no error
counted twice; after a clean stop (in-process) and after SIGKILL (the service as a process, with
telemetry redelivered)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest
from health_scoring_helpers import T0, Recorder, eventually, gpu_uuid, health_scoring, row, stats

from gpuaware import bus
from gpuaware.schemas import ALERT_RAISED, GPU_STATE_CHANGED, AlertRaised, GpuStateChanged, HealthState
from gpuaware.schemas.streams import ALERTS

pytestmark = pytest.mark.faults  # `make test-faults` runs the fault scenarios alone


def _track(url: str, cluster: str, gpu: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT track FROM health_gpu_state WHERE cluster = %s AND gpu_uuid = %s",
                            (cluster, gpu)).fetchone()[0]


async def test_a_clean_restart_keeps_states_and_open_alerts(recorder: Recorder, nats_proc, cluster: str,
                                                           fresh_database_url: str) -> None:
    r = recorder
    g0, g1 = gpu_uuid("n1", 0), gpu_uuid("n1", 1)
    await r.nodes(["n1"])
    async with health_scoring(nats_proc.url, fresh_database_url, cluster):
        await r.sample("n1", T0, [row("n1", 0), row("n1", 1)])
        # three uncorrectable errors: quarantined at once, and the aftershock hazard keeps it so for days
        await r.sample("n1", T0 + 10, [row("n1", 0, ecc_uncorrected_aggregate=3, ecc_uncorrected_volatile=3),
                                       row("n1", 1)])
        await r.wait(lambda: r.states_of(g0) == ["healthy", "quarantined"], what="quarantined")
        await r.wait(lambda: {"gpu_quarantined", "gpu_failure_risk"} <= set(r.rules("raised", g0)), what="alerts")
    changes, raised = len(r.changes), len(r.raised)
    open_before = [a for a in r.raised if a.fingerprint not in {x.fingerprint for x in r.resolved}]
    async with health_scoring(nats_proc.url, fresh_database_url, cluster, instance_id="h2") as svc:
        s = await stats(r.nc)
        assert s.restored_gpus == 2 and s.restored_alerts == len(open_before) >= 2
        assert svc.view.book.state_of(g0) is HealthState.QUARANTINED
        for k in range(2, 6):  # the same counters again: nothing new happened to the GPU
            await r.sample("n1", T0 + 10 * k, [row("n1", 0, ecc_uncorrected_aggregate=3, ecc_uncorrected_volatile=3),
                                               row("n1", 1)])
        # a later sample quarantines GPU 1: once that change has arrived, whatever the samples before it
        # published about GPU 0 has arrived too
        await r.sample("n1", T0 + 60, [row("n1", 0, ecc_uncorrected_aggregate=3, ecc_uncorrected_volatile=3),
                                       row("n1", 1, ecc_uncorrected_aggregate=3, ecc_uncorrected_volatile=3)])
        await r.wait(lambda: r.states_of(g1) == ["healthy", "quarantined"], what="the later sample's effect")
        after = [c for c in r.changes[changes:] if c.gpu_uuid == g0]
        assert after == [], after  # no state of GPU 0 flipped (nor a "first" again)
        assert [a for a in r.raised[raised:] if a.gpu_uuid == g0] == [] and not r.resolved  # nothing re-raised
    track = _track(fresh_database_url, cluster, g0)
    assert track["lifetime_ue"] == 3 and track["inputs"]["counter_resets"] == 0 and track["inputs"]["duplicates"] == 0


def _service(nats_url: str, database_url: str, cluster: str, instance: str, log: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NATS_URL": nats_url, "DATABASE_URL": database_url,
           "GPUAWARE_HEALTH_SCORING_CLUSTER": cluster, "GPUAWARE_HEALTH_SCORING_INSTANCE_ID": instance,
           "GPUAWARE_HEALTH_SCORING_CHECKPOINT_S": "0.5", "GPUAWARE_HEALTH_SCORING_ACK_WAIT_S": "2",
           "GPUAWARE_HEALTH_SCORING_POLL_S": "0.2", "GPUAWARE_HEALTH_SCORING_INVENTORY_WAIT_S": "1",
           "GPUAWARE_HEALTH_SCORING_LOG_LEVEL": "INFO"}
    return subprocess.Popen([sys.executable, "-m", "gpuaware.services.health_scoring"], env=env, stdout=log,
                            stderr=subprocess.STDOUT)


async def _stored(r: Recorder, subject: str, typ: type) -> list[Any]:
    """Every message of this test's cluster the ALERTS stream stores on ``subject`` (from its start)."""
    got: list[Any] = []
    f = await bus.follow(r.js, [bus.Channel(subject, typ)], lambda m, _d: got.append(m), stream=ALERTS.name,
                         deliver="all", with_suffixes=True, name=f"t-{time.monotonic_ns()}")
    try:
        await asyncio.wait_for(f.caught_up.wait(), 10)
    finally:
        await f.stop()
    return [m for m in got if m.cluster == r.cluster]


async def _answers(nc: Any) -> bool:
    try:
        await stats(nc, timeout=0.5)
    except (bus.NoResponders, bus.RequestTimeout):
        return False
    return True


async def test_sigkill_mid_stream_loses_nothing_and_counts_nothing_twice(recorder: Recorder, nats_proc, cluster: str,
                                                                        fresh_database_url: str, tmp_path) -> None:
    r = recorder
    g0 = gpu_uuid("n1", 0)
    await r.nodes(["n1"])
    log = (tmp_path / "health.log").open("ab")
    proc = _service(nats_proc.url, fresh_database_url, cluster, "k1", log)
    try:
        deadline = time.monotonic() + 30
        while not await _answers(r.nc):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "health.log").read_text()
            await asyncio.sleep(0.2)
        await r.sample("n1", T0, [row("n1", 0), row("n1", 1)])
        await r.sample("n1", T0 + 10, [row("n1", 0, ecc_uncorrected_aggregate=2, ecc_uncorrected_volatile=2),
                                       row("n1", 1)])
        await r.wait(lambda: r.states_of(g0) == ["healthy", "quarantined"], timeout=15, what="quarantined")
        # a burst in flight, then SIGKILL: no drain, no last checkpoint; what was not acked comes back
        for k in range(2, 40):
            ue = 2 + k // 10
            await r.sample("n1", T0 + 10 * k, [row("n1", 0, ecc_uncorrected_aggregate=ue, ecc_uncorrected_volatile=ue),
                                               row("n1", 1)])
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        changes, raised = len(r.changes), len(r.raised)
        proc = _service(nats_proc.url, fresh_database_url, cluster, "k2", log)
        deadline = time.monotonic() + 30
        while not await _answers(r.nc):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "health.log").read_text()
            await asyncio.sleep(0.2)
        await r.sample("n1", T0 + 400, [row("n1", 0, ecc_uncorrected_aggregate=5, ecc_uncorrected_volatile=5),
                                        row("n1", 1)])
        await eventually(lambda: _track(fresh_database_url, cluster, g0)["last_at"] == T0 + 400, timeout=15,
                         what="the last sample checkpointed")
        s = await stats(r.nc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
        log.close()
    # the uncorrectable errors are counted exactly once (5 in all) whatever was replayed, and nothing read
    # as bad input; the state never flipped back and forth and no alert was raised a second time
    track = _track(fresh_database_url, cluster, g0)
    assert track["lifetime_ue"] == 5
    assert track["inputs"]["duplicates"] == 0 and track["inputs"]["out_of_order"] == 0
    assert track["inputs"]["counter_resets"] == 0
    # what the stream holds (what every consumer reads): a change published by the killed instance whose
    # checkpoint had not committed is published again after the restart, with the same message id, so
    # JetStream stores it once (a core subscriber, like the recorder, may see both publications)
    stored = await _stored(r, GPU_STATE_CHANGED, GpuStateChanged)
    assert [c.current.value for c in stored if c.gpu_uuid == g0] == ["healthy", "quarantined"]
    assert len(stored) == len({(c.gpu_uuid, c.current, c.changed_at) for c in r.changes})
    assert {(c.gpu_uuid, c.current, c.changed_at) for c in r.changes} == {
        (c.gpu_uuid, c.current, c.changed_at) for c in stored} and changes <= len(r.changes)
    raised_stored = await _stored(r, ALERT_RAISED, AlertRaised)
    fps = [a.fingerprint for a in raised_stored]
    assert len(fps) == len(set(fps)) and set(fps) == {a.fingerprint for a in r.raised} and raised <= len(r.raised)
    assert s.restored_gpus == 2
    assert s.received >= 1 and s.counts['observations'] >= 2  # the restarted instance saw telemetry
