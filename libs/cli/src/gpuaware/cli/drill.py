"""`gpuaware drill`: the fault suite. A replay on the digital twin through the real services and the
real embedded stack while a planned fault happens (`gpuaware.cli.chaos`), then the invariants that
must still hold, each checked against what was actually stored and decided:

* every pod the twin submitted reached the bus, and each is bound, finished, or pending with a reason
  (no pending pod lost);
* no pod bound twice; no GPU slice over-allocated, in the replay of every binding and release and in
  the twin's own snapshot at the end;
* every event of the loop recorded in PostgreSQL by the recorder service (``placement_events`` row
  counts per subject equal what crossed the bus; the "services" scenario kills the recorder too);
* every telemetry sample on the bus stored in PostgreSQL exactly once (set of (GPU, time) on the
  stream == the rows of the run's GPUs; the table's key forbids a second copy, the check shows none
  was needed or lost);
* every planned fault done and undone, and the loop deciding through or after each (the time from
  recovery to the next decision is a figure: at the quiet end of a day there may be nothing to decide).

With leaders killed (``kill-leader`` steps, the ``ha`` scenario), over what the streams stored:

* every leader killed was replaced within ``TAKEOVER_MAX_S`` (the lease naming another holder, timed
  by the drill from the kill);
* one publisher at a time: in stream order, the instance (``source``) publishing health scores, demand
  forecasts or quota usage changes at most once per kill of that service;
* health-scoring: no score published twice (a GPU's score at one observation time stored once), no
  state change twice (GPU, time, state), none lost (each GPU's changes chain: every ``previous`` is
  the state the one before it reached), and every sample on the bus acknowledged by its durable (a
  sample is acknowledged only once its scores are stored and checkpointed), measured once the
  telemetry agents stopped and while both instances still run;
* forecasting: no forecast twice (subject, step, origin, GPU or series stored once), and no minute of
  demand lost (the minute path's origins, ``DEMAND_PATH_STEP_S``, run contiguous, a minute apart, from
  the first to the last);
* quota: no admission lost or doubled: once the binder and placement stopped, a usage report of the
  leader counts, queue by queue, exactly the pods the binder's events left running.

It always starts its own stack in ``--data-dir`` (free ports): it kills servers, so it never touches
one that ``NATS_URL`` / ``DATABASE_URL`` name. The same function runs in ``make test-faults``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from gpuaware import bus, tsdb
from gpuaware.cli.chaos import LEASE_BUCKETS, SCENARIOS, ChaosError, ChaosRunner, ChaosStep, parse_chaos
from gpuaware.cli.demo_analysis import analyse, rebuild_workload
from gpuaware.cli.demo_bus import wait_for
from gpuaware.cli.demo_config import DemoConfig, RunSpec
from gpuaware.cli.demo_record import RunResult, SubjectCounter
from gpuaware.cli.demo_run import run_once
from gpuaware.cli.options import bounded
from gpuaware.cli.processes import ProcessGroup, ServiceProcess, service_command
from gpuaware.cli.stack import database_env, provision_stack, service_databases
from gpuaware.devstack import StackError, stack_down, stack_up
from gpuaware.placement import DEFAULT_PROFILE
from gpuaware.schemas import (
    ALERTS,
    BINDER,
    FORECAST,
    GPU_SAMPLED,
    PLACEMENT,
    QUOTA,
    TELEMETRY,
    DemandPredicted,
    GpuSampled,
    GpuScored,
    GpuStateChanged,
    GpuUtilPredicted,
    PodBindFailed,
    PodBound,
    PodFinished,
    PodPreempted,
    QuotaUsageReported,
    health_durable,
)

__all__ = ["DrillResult", "drill", "run_drill", "telemetry_ledger"]

console = Console()
T = TypeVar("T")

DEFAULT_DURATION_S = {"services": 40.0, "stack": 50.0, "cluster": 30.0, "ha": 40.0}
"""wall seconds replayed per scenario: the plan's last step, its down time and some decisions after"""
CLUSTER_NODES = 3
TAKEOVER_MAX_S = 5.0
"""a killed leader's lease is held by another instance within this long"""
HEALTH_DRAIN_S = 90.0
"""how long the drill waits for health-scoring's durable to acknowledge every sample: a batch delivered
to a leader the drill killed comes back only after the consumer's ack wait (30 s)"""
QUOTA_SETTLE_S = 90.0
"""how long the drill waits for quota's usage report to count exactly the pods the binder left running:
an admission placement made just before it stopped holds its queue until quota's reservation TTL (60 s)
lapses, and the leader reports every few seconds"""
DEMAND_PATH_STEP_S = 600.0
"""``step_s`` of the minute path's demand forecasts (one per closed minute of demand, a path on a
10-minute grid: ``gpuaware.forecast``'s 600 s over the demand clock's scale, 1, as demand runs on the
pod events' own time); the hours-ahead path's step is an hour"""
DEMAND_MINUTE_S = 60.0
"""the minute path's origins are this far apart (each closed minute of demand: its end)"""


@dataclass
class DrillResult:
    scenario: str
    plan: str
    invariants: dict[str, bool]
    figures: dict[str, Any]
    chaos: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(self.invariants.values())

    def json(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "plan": self.plan, "ok": self.ok, "invariants": self.invariants,
                "figures": self.figures, "chaos": self.chaos}


async def telemetry_ledger(js: bus.JetStream, nodes: set[str]) -> tuple[set[tuple[str, int]], int]:
    """Every (GPU uuid, sample time as stored: microseconds since 2000) the TELEMETRY stream holds for
    ``nodes``, and how many sample messages carried them (a republished batch counts twice, its rows
    once)."""
    keys: set[tuple[str, int]] = set()
    batches = 0

    def on_sample(ev: GpuSampled, _d: Any) -> None:
        nonlocal batches
        if ev.node in nodes:
            batches += 1
            t = int(tsdb.timestamp_micros(ev.sampled_at))
            keys.update((u, t) for u in ev.gpu_uuid)

    follower = await bus.follow(js, [bus.Channel(GPU_SAMPLED, GpuSampled)], on_sample, stream=TELEMETRY.name,
                                with_suffixes=True, name="drill-telemetry")
    try:
        await follower.sync(timeout=30.0)
    finally:
        await follower.stop()
    return keys, batches


_STORED = ("SELECT gpu_uuid, ((extract(epoch FROM ts) - 946684800) * 1000000)::bigint FROM gpu_samples "
           "WHERE gpu_uuid = ANY(%s)")


async def _stored(pool: Any, uuids: list[str]) -> tuple[set[tuple[str, int]], int]:
    async with pool.connection() as conn, conn.cursor() as cur:
        await cur.execute(_STORED, (uuids,))
        rows = await cur.fetchall()
    return {(u, int(t)) for u, t in rows}, len(rows)


def _submitted(cfg: DemoConfig, run: RunResult, slack_s: float) -> set[str]:
    """Pods of the workload the twin had submitted by the end of the run (virtual time), less those in
    the last ``slack_s`` wall seconds (in flight when the run stopped)."""
    reached = run.virtual_end - run.started_at - slack_s * cfg.speed
    return {uid for uid, p in rebuild_workload(cfg).items() if p.arrival_s <= reached}


def invariants_of(cfg: DemoConfig, run: RunResult, tel: dict[str, Any]) -> tuple[dict[str, bool], dict[str, Any]]:
    """The drill's invariants (module docstring) and the figures behind them."""
    a = analyse(run, cfg, rebuild_workload(cfg))
    inv = a["invariants"]
    submitted = _submitted(cfg, run, slack_s=2.0)
    never_seen = sorted(submitted - set(run.log.pending))
    decided_at = sorted(t for t, _ in run.log.decision_times)
    recovery: dict[str, float | None] = {}
    went_on: dict[str, bool] = {}
    for step in run.chaos:
        after = [t for t in decided_at if step["back_wall"] is not None and t >= step["back_wall"]]
        recovery[step["step"]] = round(after[0] - step["back_wall"], 2) if after else None
        went_on[step["step"]] = step["down_wall"] is not None and any(t >= step["down_wall"] for t in decided_at)
    loop_rows = dict(a["recorded"])
    t0 = next((st["back_wall"] - st["back_at_s"] for st in run.chaos if st["back_wall"] is not None), None)
    per_5s = ([0] * (int((decided_at[-1] - t0) // 5) + 1)) if decided_at and t0 is not None else []
    if per_5s and t0 is not None:
        for t in decided_at:
            if t >= t0:
                per_5s[int((t - t0) // 5)] += 1
    figures = {
        "pods": a["pods"], "pods_submitted": len(submitted), "pods_never_on_the_bus": never_seen[:10],
        "decisions": a["recorded"].get("placement.pod.decided.v1", 0),
        "double_bound": inv["double_bound_examples"], "over_allocations": inv["over_allocation_examples"],
        "over_allocations_in_world_snapshot": inv["over_allocations_in_world_snapshot"],
        "recorded": loop_rows, "placement_events_rows": a["placement_events_rows"],
        "telemetry": tel, "first_decision_after_recovery_s": recovery, "decisions_per_5s": per_5s,
        "wall_s": a["wall_s"], "virtual_s": a["virtual_s"], "failure": run.failure,
    }
    checks = {
        "every pod the twin submitted reached the bus": not never_seen and len(submitted) > 0,
        "every pod accounted (bound, finished, or pending with a reason)": a["pods"]["unaccounted_count"] == 0,
        "no pod bound twice": inv["double_bound"] == 0,
        "no GPU slice over-allocated (event replay and the twin's snapshot)":
            inv["over_allocations_replayed"] == 0 and inv["over_allocations_in_world_snapshot"] == 0
            and inv["world_snapshot_pods"] > 0,
        "every loop event in PostgreSQL (placement_events = bus, per subject)":
            bool(loop_rows) and a["placement_events_rows"] == loop_rows,
        "every telemetry sample on the bus in PostgreSQL, once":
            tel.get("on_bus", 0) > 0 and tel.get("missing", 1) == 0 and tel.get("not_on_bus", 1) == 0,
        "every planned fault done and undone": bool(run.chaos) and all(s["ok"] for s in run.chaos),
        "the loop went on deciding through or after every fault": bool(went_on) and all(went_on.values()),
        "the replay reached the end of its window": run.reached_end,
    }
    return checks, figures


def _finder(procs: ProcessGroup) -> Callable[[str], ServiceProcess | None]:
    def find(service: str) -> ServiceProcess | None:
        for p in procs.processes:
            if p.name == service or (p.name.startswith(service + "-") and not service.startswith("placement")):
                return p
        return None
    return find


async def run_drill(plan: str, *, data_dir: Path, out: Path, duration_s: float | None = None,
                    nats_nodes: int | None = None, nodes: int = 12, load: float = 1.8, seed: int = 7,
                    progress: Callable[[str], None] | None = None) -> DrillResult:
    """One scenario (a name in `SCENARIOS`) or plan: its own stack in ``data_dir``, the services, the
    replay with the planned faults, the invariants. The stack is stopped at the end."""
    steps = parse_chaos(plan)
    scenario = plan if plan in SCENARIOS else "custom"
    if nats_nodes is None:
        nats_nodes = CLUSTER_NODES if any(s.kind == "nats-node" for s in steps) else 1
    if duration_s is None:
        duration_s = DEFAULT_DURATION_S.get(scenario) or max(s.at_s + s.down_s for s in steps) + 15.0
    say = progress or (lambda _m: None)
    out.mkdir(parents=True, exist_ok=True)
    say(f"starting the stack ({nats_nodes} NATS node{'s' if nats_nodes > 1 else ''} + PostgreSQL)")
    stack = await asyncio.to_thread(lambda: stack_up(data_dir, nats_port=0, pg_port=0, nats_nodes=nats_nodes))
    try:
        nats_url, database_url = stack.state.nats_url, stack.state.database_url
        # as the chart provisions: every stream exists before the first follower or publisher, and each
        # service logs in to PostgreSQL as its own role
        await asyncio.to_thread(provision_stack, stack.state, data_dir, streams=True)
        window = 24 * 3600.0
        cfg = DemoConfig(out=out, run_id=f"drill-{uuid.uuid4().hex[:6]}", duration_s=duration_s, window_s=window,
                         speed=window / duration_s, trace="generator", nodes=str(nodes), default_nodes=nodes,
                         load=load, seed=seed, max_pods=0, slo_s=600.0, own_nats=True,
                         database_urls=service_databases(stack.state, data_dir))
        spec = RunSpec("gpuaware", DEFAULT_PROFILE, f"{cfg.run_id}-gpuaware")
        return await _drill(cfg, spec, steps, scenario, plan, data_dir, nats_url, database_url, say, nats_nodes)
    finally:
        say("stopping the stack")
        await asyncio.to_thread(stack_down, data_dir)


async def _drill(cfg: DemoConfig, spec: RunSpec, steps: tuple[ChaosStep, ...], scenario: str, plan: str,
                 data_dir: Path, nats_url: str, database_url: str, say: Callable[[str], None],
                 nats_nodes: int) -> DrillResult:
    pool = await tsdb.open_pool(database_url, application_name="gpuaware-drill", min_size=0, max_size=2,
                                      timeout=5.0)
    try:
        async with bus.connected(nats_url, name="gpuaware-drill") as nc:
            with ProcessGroup() as procs:
                common = {"NATS_URL": nats_url,
                          **database_env(cfg.database_urls, "telemetry-collector", database_url)}
                procs.start("telemetry-collector", service_command("gpuaware.services.telemetry", "collector"),
                            {**common, "GPUAWARE_TELEMETRY_COLLECTOR_CLUSTER": cfg.run_id},
                            cfg.out / "logs" / "telemetry-collector.log")
                runner = ChaosRunner(steps, find=_finder(procs), data_dir=data_dir, procs=procs,
                                     lease_holder=functools.partial(lease_holder, nc.jetstream(), spec.cluster),
                                     answers=functools.partial(instance_answers, nc))
                killed = [s.target for s in steps if s.kind == "kill-leader"]
                settled: dict[str, Any] = {}
                settle = (functools.partial(ha_settle, nc.jetstream(), spec.cluster, killed, procs, settled, say)
                          if killed else None)
                say(f"replaying {cfg.window_s / 3600:.0f} virtual hours in {cfg.duration_s:.0f} s with: "
                    + ", ".join(s.label for s in steps))
                run = await run_once(cfg, spec, nc=nc, nats_url=nats_url, database_url=database_url, pool=pool,
                                     counter=SubjectCounter(), procs=procs, progress=lambda *_a: None,
                                     chaos=runner, settle=settle)
                say("checking the invariants")
                js = nc.jetstream()
                collector = _finder(procs)("telemetry-collector")
                if collector is not None:
                    await _collector_drained(js, collector, say)
                    await asyncio.to_thread(collector.stop, 15.0)
                tel = await _patiently(lambda: _telemetry(js, pool, run))
                ha = await ha_ledger(js, spec.cluster, killed, settled) if killed else None
                replicas = {name: await _patiently(functools.partial(_replicas, js, name))
                            for name in (BINDER.name, PLACEMENT.name, TELEMETRY.name)}
        checks, figures = invariants_of(cfg, run, tel)
        figures["stream_replicas"] = replicas
        if ha is not None:
            ha_checks, figures["ha"] = ha_invariants(run.chaos, ha)
            checks.update(ha_checks)
        if nats_nodes > 1:
            checks["the loop's streams replicated across the cluster (R3)"] = all(r >= 3 for r in replicas.values())
        return DrillResult(scenario=scenario, plan=", ".join(s.label for s in steps), invariants=checks,
                           figures=figures, chaos=run.chaos)
    finally:
        await pool.close()


async def lease_holder(js: bus.JetStream, cluster: str, service: str) -> str | None:
    """The instance holding ``service``'s lease for ``cluster`` (None: nobody, or unreadable now)."""
    try:
        kv = await js.key_value(LEASE_BUCKETS[service])
        entry = await kv.get(cluster)
    except Exception:  # absent, deleted, expired, or the server busy: nobody known to hold it
        return None
    return entry.value.decode() if entry.value else None


async def instance_answers(nc: bus.Client, service: str, instance: str, timeout: float = 1.0) -> bool:
    """Whether the instance ``instance`` of ``service`` answers ``$SRV.PING.<service>`` (each instance's
    micro service carries its instance id in its metadata, registered once it has started)."""
    found = asyncio.Event()

    async def on(msg: Any) -> None:
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            if (json.loads(msg.data).get("metadata") or {}).get("instance") == instance:
                found.set()

    sub = await nc.subscribe(nc.new_inbox(), cb=on)
    try:
        await nc.publish(f"$SRV.PING.{service}", b"", reply=sub.subject)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(found.wait(), timeout)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return found.is_set()


def _switches(sources: list[str]) -> int:
    return sum(1 for a, b in itertools.pairwise(sources) if a != b)


async def _stored_events(js: bus.JetStream, stream: str, channels: list[bus.Channel[Any]]) -> list[Any]:
    """Every event of ``channels`` (with routing suffixes) ``stream`` holds, in stream order."""
    out: list[Any] = []
    follower = await bus.follow(js, channels, lambda ev, _d: out.append(ev), stream=stream, with_suffixes=True,
                                name=f"drill-{stream.lower()}")
    try:
        await follower.sync(timeout=60.0)
    finally:
        await follower.stop()
    return out


async def ha_settle(js: bus.JetStream, cluster: str, killed: list[str], procs: ProcessGroup,
                    out: dict[str, Any], say: Callable[[str], None]) -> None:
    """``run_once``'s ``settle`` in an ``ha`` run: the binder, placement and the telemetry agents have
    stopped, the leader-elected services still run. Waits (together) for health-scoring's durable to
    have delivered and acknowledged every sample, and for a quota usage report that counts, queue by
    queue, the pods the binder left running. What it saw goes in ``out`` (``ha_ledger``'s ``settled``)."""
    waits = []
    if "health-scoring" in killed:
        waits.append(_health_settled(js, cluster, procs, out, say))
    if "quota" in killed:
        waits.append(_quota_settled(js, cluster, out, say))
    await asyncio.gather(*waits)


def _consumer_figures(info: Any) -> dict[str, Any]:
    return {"pending": info.num_pending, "ack_pending": info.num_ack_pending, "redelivered": info.num_redelivered,
            "delivered_stream_seq": info.delivered.stream_seq if info.delivered else None,
            "ack_floor_stream_seq": info.ack_floor.stream_seq if info.ack_floor else None,
            "max_ack_pending": info.config.max_ack_pending}


async def _health_settled(js: bus.JetStream, cluster: str, procs: ProcessGroup, out: dict[str, Any],
                          say: Callable[[str], None]) -> None:
    durable = health_durable(cluster)
    instances = [p for p in procs.processes if p.name.startswith("health-scoring")]
    t0 = time.monotonic()

    async def drained() -> bool | None:
        info = await js.consumer_info(TELEMETRY.name, durable)
        out["health_consumer"] = _consumer_figures(info)
        return None if info.num_pending or info.num_ack_pending else True

    try:
        await wait_for(drained, timeout=HEALTH_DRAIN_S, what="health-scoring to acknowledge every sample",
                       procs=instances, interval=0.5)
        out["health_drained"] = True
    except (TimeoutError, RuntimeError) as exc:
        say(f"health-scoring did not catch up: {exc}")
        out["health_drained"] = False
        out["health_error"] = str(exc)[:1000]
    out["health_drain_s"] = round(time.monotonic() - t0, 2)


BINDER_POD_EVENTS = [bus.event_channel(t) for t in (PodBound, PodBindFailed, PodPreempted, PodFinished)]
"""the binder's events that start and end a pod's run (quota's ledger follows the same)"""


def binder_running(events: list[Any], cluster: str) -> dict[str, str]:
    """Pod uid -> queue of every pod of ``cluster`` left running by the binder's events (in stream
    order: bound starts a run, bind_failed, preempted and finished end it)."""
    running: dict[str, str] = {}
    for ev in events:
        if ev.cluster != cluster:
            continue
        if isinstance(ev, PodBound):
            running[ev.pod_uid] = ev.queue
        else:
            running.pop(ev.pod_uid, None)
    return running


def quota_mismatch(report: QuotaUsageReported, running: dict[str, str]) -> dict[str, list[int]]:
    """Each queue whose ``running_pods`` in ``report`` differs from the pods ``running`` (uid -> queue)
    puts there: queue -> [reported, expected]. A queue counts the pods of every queue below it, as quota
    reports (the report's ``parent``s say which); a queue the report lacks counts as reported 0. Empty:
    every admission counted once, none lost."""
    parent = {q.queue: q.parent for q in report.queues}
    expected: dict[str, int] = {}
    for queue in running.values():
        q: str | None = queue
        seen: set[str] = set()
        while q is not None and q not in seen:
            seen.add(q)
            expected[q] = expected.get(q, 0) + 1
            q = parent.get(q)
    reported = {q.queue: q.running_pods for q in report.queues}
    return {q: [reported.get(q, 0), expected.get(q, 0)] for q in sorted(set(reported) | set(expected))
            if reported.get(q, 0) != expected.get(q, 0)}


async def _quota_settled(js: bus.JetStream, cluster: str, out: dict[str, Any], say: Callable[[str], None]) -> None:
    """The binder has stopped: what it left running is final. Quota's reports from now on are read until
    one counts exactly that (an admission placement made last lapses after quota's reservation TTL)."""
    t0 = time.monotonic()
    reports: list[QuotaUsageReported] = []
    follower = await _patiently(lambda: bus.follow(
        js, [bus.event_channel(QuotaUsageReported).at(cluster)], lambda ev, _d: reports.append(ev),
        stream=QUOTA.name, deliver="new", with_suffixes=True, name="drill-quota-settle"))
    try:
        running = binder_running(await _patiently(lambda: _stored_events(js, BINDER.name, BINDER_POD_EVENTS)),
                                 cluster)
        mismatch: dict[str, list[int]] | None = None

        async def counted() -> bool | None:
            nonlocal mismatch
            if not reports:
                return None
            mismatch = quota_mismatch(reports[-1], running)
            return None if mismatch else True

        try:
            await wait_for(counted, timeout=QUOTA_SETTLE_S, what="quota to report what the binder left running",
                           procs=[], interval=0.5)
            out["quota_settled"] = True
        except TimeoutError as exc:
            say(f"quota's usage never matched the binder's: {exc}")
            out["quota_settled"] = False
        out["quota_end"] = {"running_pods": len(running), "reports": len(reports),
                            "mismatch": dict(list((mismatch or {}).items())[:10]),
                            "wait_s": round(time.monotonic() - t0, 2)}
    finally:
        with contextlib.suppress(Exception):
            await follower.stop(delete=True)


async def ha_ledger(js: bus.JetStream, cluster: str, killed: list[str], settled: dict[str, Any]) -> dict[str, Any]:
    """What the streams hold of the leader-elected services' publications, with what ``ha_settle`` saw
    while they still ran (``ha_invariants``' input)."""
    out: dict[str, Any] = {"killed": killed, **settled}
    if "health-scoring" in killed:
        out.setdefault("health_drained", False)
        events = await _patiently(lambda: _stored_events(
            js, ALERTS.name, [bus.event_channel(GpuScored).at(cluster), bus.event_channel(GpuStateChanged).at(cluster)]))
        out["scores"] = [e for e in events if isinstance(e, GpuScored)]
        out["changes"] = [e for e in events if isinstance(e, GpuStateChanged)]
    if "forecasting" in killed:
        out["forecasts"] = await _patiently(lambda: _stored_events(
            js, FORECAST.name, [bus.event_channel(GpuUtilPredicted).at(cluster),
                                bus.event_channel(DemandPredicted).at(cluster)]))
    if "quota" in killed:
        out.setdefault("quota_settled", False)
        out["usage"] = await _patiently(lambda: _stored_events(
            js, QUOTA.name, [bus.event_channel(QuotaUsageReported).at(cluster)]))
    return out


def ha_invariants(chaos: list[dict[str, Any]], ha: dict[str, Any]) -> tuple[dict[str, bool], dict[str, Any]]:
    """The high-availability invariants (module docstring) and the figures behind them."""
    kills = [c for c in chaos if c["kind"] == "kill-leader"]
    takeovers = {c["step"]: c.get("takeover_s") for c in kills}
    checks = {f"every leader killed replaced within {TAKEOVER_MAX_S:g} s (takeover measured by the drill)":
              bool(kills) and all(t is not None and t <= TAKEOVER_MAX_S for t in takeovers.values())}
    figures: dict[str, Any] = {"takeover_s": takeovers}
    n_kills = {s: sum(1 for c in kills if c["target"] == s) for s in ha["killed"]}
    if "scores" in ha:
        scores, changes = ha["scores"], ha["changes"]
        score_keys = [(e.gpu_uuid, e.scored_at) for e in scores]
        change_keys = [(e.gpu_uuid, e.changed_at, e.current) for e in changes]
        broken = 0
        last: dict[str, Any] = {}
        for e in changes:
            before = last.get(e.gpu_uuid)
            if before is not None and e.previous != before:
                broken += 1
            last[e.gpu_uuid] = e.current
        switches = _switches([e.source for e in scores])
        figures["health"] = {"scores": len(scores), "state_changes": len(changes),
                             "scores_twice": len(score_keys) - len(set(score_keys)),
                             "changes_twice": len(change_keys) - len(set(change_keys)), "chain_breaks": broken,
                             "publishers": sorted({e.source for e in scores}), "publisher_switches": switches,
                             "every_sample_acknowledged": ha["health_drained"],
                             "drain_s": ha.get("health_drain_s"), "durable": ha.get("health_consumer")}
        h = figures["health"]
        checks["health-scoring: no score or state change published twice"] = (
            h["scores"] > 0 and h["scores_twice"] == 0 and h["changes_twice"] == 0)
        checks["health-scoring: no state change lost (each GPU's changes chain)"] = broken == 0
        checks["health-scoring: every sample on the bus scored and acknowledged"] = bool(ha["health_drained"])
        checks["health-scoring: one publisher at a time"] = switches <= n_kills["health-scoring"]
    if "forecasts" in ha:
        fcs = ha["forecasts"]
        keys: list[tuple[Any, ...]] = []
        for e in fcs:
            if isinstance(e, GpuUtilPredicted):
                keys += [("gpu", e.node, e.step_s, e.issued_at, g.gpu_uuid, g.metric) for g in e.gpus]
            else:
                keys += [("demand", e.step_s, e.issued_at, s.metric, tuple(sorted(s.labels.items())))
                         for s in e.series]
        demand = [e for e in fcs if isinstance(e, DemandPredicted)]
        minutes = [e for e in demand if e.step_s == DEMAND_PATH_STEP_S]
        origins = sorted({e.issued_at for e in minutes})
        gaps = [[a, round(b - a, 3)] for a, b in itertools.pairwise(origins) if abs(b - a - DEMAND_MINUTE_S) > 1e-3]
        switches = _switches([e.source for e in fcs])  # every forecast, in stream order: who published it
        figures["forecasting"] = {"forecasts": len(fcs), "series_points": len(keys),
                                  "twice": len(keys) - len(set(keys)),
                                  "demand_forecasts_by_step_s": {f"{k:g}": n for k, n in sorted(
                                      collections.Counter(e.step_s for e in demand).items())},
                                  "demand_minutes": len(origins), "demand_gaps": gaps[:10],
                                  "publishers": sorted({e.source for e in fcs}), "publisher_switches": switches}
        checks["forecasting: no forecast published twice"] = bool(keys) and len(keys) == len(set(keys))
        checks["forecasting: no minute of demand lost (origins contiguous)"] = len(origins) > 1 and not gaps
        checks["forecasting: one publisher at a time"] = switches <= n_kills["forecasting"]
    if "usage" in ha:
        usage = ha["usage"]
        switches = _switches([e.source for e in usage])
        figures["quota"] = {"usage_reports": len(usage), "publishers": sorted({e.source for e in usage}),
                            "publisher_switches": switches}
        checks["quota: one usage reporter at a time"] = bool(usage) and switches <= n_kills["quota"]
        figures["quota"]["at_the_end"] = ha.get("quota_end")
        checks["quota: no admission lost or doubled (its last report counts the pods the binder left running, "
               "per queue)"] = bool(ha.get("quota_settled"))
    return checks, figures


COLLECTOR_DURABLE = "telemetry-collector"
"""the collector's durable consumer on the TELEMETRY stream (its settings' default)"""

COLLECTOR_DRAIN_S = 120.0
"""how long the drill waits for the collector to store what the stream holds: a batch delivered to a
collector the drill killed comes back only after the consumer's ack wait (30 s), and a busy machine
writes slower"""


async def collector_drained(js: bus.JetStream) -> bool | None:
    """True once the collector's durable has nothing left to deliver and nothing delivered but not yet
    acknowledged: it acknowledges a batch only after its COPY committed, so then every sample the stream
    holds is in PostgreSQL. None while not yet (``wait_for``'s "no answer")."""
    info = await js.consumer_info(TELEMETRY.name, COLLECTOR_DURABLE)
    return None if info.num_pending or info.num_ack_pending else True


async def _collector_drained(js: bus.JetStream, collector: ServiceProcess, say: Callable[[str], None]) -> None:
    """Wait for the collector to store every sample on the bus before the drill compares the two. A
    collector that never catches up is not an error here: the telemetry invariant then reports what is
    missing."""
    try:
        await wait_for(lambda: collector_drained(js), timeout=COLLECTOR_DRAIN_S,
                       what="the telemetry collector to store every sample", procs=[collector], interval=0.5)
    except (TimeoutError, RuntimeError) as exc:
        say(f"the collector did not catch up: {exc}")


async def _telemetry(js: bus.JetStream, pool: Any, run: RunResult) -> dict[str, Any]:
    on_bus, batches = await telemetry_ledger(js, set(run.node_names))
    stored, rows = await _stored(pool, sorted(run.gpus))
    return {"batches": batches, "on_bus": len(on_bus), "stored": rows, "missing": len(on_bus - stored),
            "not_on_bus": len(stored - on_bus)}


async def _replicas(js: bus.JetStream, stream: str) -> int:
    return (await js.stream_info(stream)).config.num_replicas or 1


async def _patiently(ask: Callable[[], Awaitable[T]], attempts: int = 6) -> T:
    """``ask()``, asked again with the bus's backoff while nothing answers: after a cluster node comes
    back, a stream's leader may still be being elected, and until then the cluster answers nothing
    for that stream (CI's cluster drill once timed out on STREAM.INFO here). Each read the drill asks
    for is a fresh read, so asking again is safe."""
    retry = bus.RetryPolicy(base=1.0, cap=8.0)
    for attempt in range(1, attempts):
        try:
            return await ask()
        except TimeoutError:  # nats-py's timeout is one
            await asyncio.sleep(retry.delay(attempt))
    return await ask()


def print_result(result: DrillResult) -> None:
    table = Table(title=f"drill {result.scenario}: {result.plan}")
    table.add_column("invariant")
    table.add_column("", justify="center")
    for name, ok in result.invariants.items():
        table.add_row(name, "[green]ok[/green]" if ok else "[red]FAILED[/red]")
    console.print(table)
    f = result.figures
    tel = f.get("telemetry", {})
    console.print(f"pods {f['pods']['arrived']} arrived, {f['decisions']} decisions; telemetry {tel.get('on_bus')} "
                  f"samples on the bus, {tel.get('stored')} stored, {tel.get('missing')} missing; first decision "
                  f"after each recovery (s): {f['first_decision_after_recovery_s']}")


def drill(
    scenario: Annotated[str, typer.Option(help="services | stack | cluster | all, or a plan such as "
                                               "'kill:binder@10+1, postgres@15+30' (kind[:target]@at_s[+down_s]; "
                                               "kinds: kill, nats, postgres, nats-node).")] = "all",
    duration: Annotated[float | None, typer.Option(callback=bounded(10.0, 3_600.0),
                                                   help="Wall seconds replayed (default per scenario).")] = None,
    nodes: Annotated[int, typer.Option(min=2, max=256, help="Twin nodes (built-in mixed cluster).")] = 12,
    out: Annotated[Path, typer.Option(help="Folder for drill-<scenario>.json and the services' logs.")] = Path(
        "drill-out"),
    data_dir: Annotated[Path, typer.Option("--data-dir", help="The drill's own stack (started on free ports, "
                                                              "stopped at the end).")] = Path(".gpuaware-drill"),
) -> None:
    """Replay a workload on the digital twin while services are killed and servers fail, then check
    that nothing was lost, doubled or over-allocated. Exits 1 when an invariant fails."""
    if os.environ.get("NATS_URL") or os.environ.get("DATABASE_URL"):
        console.print("[red]the drill kills servers: it runs only on its own stack (unset NATS_URL and "
                      "DATABASE_URL)[/red]", highlight=False)
        raise typer.Exit(2)
    plans = list(SCENARIOS) if scenario == "all" else [scenario]
    try:
        for p in plans:
            parse_chaos(p)
    except ChaosError as exc:
        console.print(f"[red]bad --scenario:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    ok = True
    for p in plans:
        name = p if p in SCENARIOS else "custom"
        console.rule(f"drill: {name}")
        started = time.monotonic()
        try:
            result = asyncio.run(run_drill(p, data_dir=data_dir, out=out / name, duration_s=duration, nodes=nodes,
                                           progress=lambda m: console.print(f"[dim]{m}[/dim]")))
        except StackError as exc:
            console.print(f"[red]cannot start the drill's stack:[/red] {exc}")
            raise typer.Exit(1) from None
        print_result(result)
        path = out / f"drill-{name}.json"
        path.write_text(json.dumps({**result.json(), "seconds": round(time.monotonic() - started, 1)}, indent=2))
        console.print(f"written: {path}")
        ok = ok and result.ok
    with contextlib.suppress(Exception):
        console.print("[green]all invariants held[/green]" if ok else "[red]an invariant failed[/red]")
    if not ok:
        raise typer.Exit(1)
