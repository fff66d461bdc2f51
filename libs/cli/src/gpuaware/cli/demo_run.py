"""One run of the demo: the real services on one digital twin, every event recorded.

A run is one cluster name (``<run id>-gpuaware`` or ``<run id>-baseline``) and one placement policy.
It starts the placement service and the binder (whose twin replays the workload on an accelerated
clock) as processes, records what crosses NATS, and ends when the twin's clock has replayed the
window (or the wall-clock budget ran out). Everything measured comes from the events the services
published, never from inside them:

    what the demo follows (in process)                the services (child processes)
    follow BINDER   binder.pod.{pending,bound,        binder: twin + clock; publishes pending,
                    bind_failed,preempted,finished},          bound, finished ...; answers world.snapshot
                    binder.checkpoint.*
    follow PLACEMENT placement.pod.{decided,          placement: consumes pending, publishes
                    unschedulable}                            decided / unschedulable; answers explain
    messages per subject (JetStream's own counts)     recorder: stores every loop event in PostgreSQL's
                                                              placement_events (the report compares)
                                                      telemetry agent + collector (when built)
    follow ALERTS   health.gpu.state_changed,         health-scoring (gpuaware run): scores the
                    alerts.gpu.{raised,resolved}              agent's samples of the twin's GPUs

Faults (the gpuaware run, when health-scoring is built): the binder's fleet develops the faults
``demo_config.plan_faults`` planned, and once the XID's GPU is quarantined the demo acts as the
operator who rebooted its node and uncordons it with ``clear`` through ``health.cordon``. Beside
health-scoring, a real Alertmanager and the alert-bridge service page on those alerts
(``demo_alerts``: skipped, with the reason in the report, where Alertmanager is not installed).

Runs are isolated: before each run the BINDER and PLACEMENT streams are deleted (their services
recreate them on start), so a decision id of the previous run (``<pod>/<attempt>``, the same pods
replayed) can neither be redelivered to the new binder nor be swallowed by the stream's duplicate
window.

At the end: one last world snapshot (checked for over-allocated GPUs), then the binder stops (a
decision it applies now may still re-queue pods), ``placement.explain`` for pending pods that have no
verdict yet, the other services stop, the demo's followers read the streams to their end, and the
recorder is stopped once it has stored everything the streams hold (its durables have nothing left to
deliver or acknowledge).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gpuaware import bus
from gpuaware.cli.chaos import ChaosRunner
from gpuaware.cli.demo_alerts import BRIDGE_NAME, DemoAlerting
from gpuaware.cli.demo_bus import (
    FORECASTING_STATS,
    HEALTH_STATS,
    delete_loop_streams,
    delete_run_consumers,
    explain_pending,
    forecast_effect,
    operator_repair,
    recorder_caught_up,
    snapshot_violations,
    wait_for,
    world_snapshot,
)
from gpuaware.cli.demo_config import (
    SOURCE,
    VIRTUAL_EPOCH,
    DemoConfig,
    Interrupted,
    RunSpec,
    demo_nodes,
    plan_faults,
    service_env,
)
from gpuaware.cli.demo_judge import effective_speed
from gpuaware.cli.demo_record import (
    BINDER_CHANNELS,
    HEALTH_CHANNELS,
    PLACEMENT_CHANNELS,
    Progress,
    RunLog,
    RunResult,
    SubjectCounter,
    failover_figures,
)
from gpuaware.cli.processes import ProcessGroup, ServiceProcess, service_built, service_command
from gpuaware.devstack import free_port
from gpuaware.schemas import (
    ALERTS,
    BINDER,
    PLACEMENT,
    PLACEMENT_EXPLAIN,
    ExplainReply,
    ExplainRequest,
    WorldSnapshotReply,
)
from gpuaware.sim import ThermalSpec
from gpuaware.tsdb import count_placement_events

__all__ = ["run_once"]

log = logging.getLogger(__name__)

RECORDER_DRAIN_S = 90.0
"""how long a run's end waits for the recorder to store what the streams hold (a database outage of the
fault drill included)"""
PACED_STRETCH = 2.5
"""a run whose twin slowed itself may take up to this many times ``--duration`` (then it stops where it
is, and the report says it did not replay the window: not judgeable)"""
STOPPED_AFTER_RUN = ("placement", "telemetry-agent-", "health-scoring", "quota", "forecasting", BRIDGE_NAME)
"""the processes a run starts besides the binder (stopped by name prefix at its end)"""
FEEDERS = ("placement", "telemetry-agent-")
"""what feeds the other services (decisions and admissions, samples): stopped before ``settle`` runs"""


async def run_once(cfg: DemoConfig, spec: RunSpec, *, nc: bus.Client, nats_url: str, database_url: str,
                   pool: Any, counter: SubjectCounter, procs: ProcessGroup, progress: Progress,
                   stop: asyncio.Event | None = None, chaos: ChaosRunner | None = None,
                   settle: Callable[[], Awaitable[None]] | None = None) -> RunResult:
    """Start placement + binder for ``spec``, replay the window, stop them, return what was recorded.
    Raises ``Interrupted`` soon after ``stop`` is set (the services are stopped first). ``chaos``: planned
    faults done during the replay (its processes found in ``procs``). ``settle``: awaited at the end of a
    run that went well, once the binder, placement and the telemetry agents stopped (nothing new reaches
    the other services) and before the others stop: the fault drill waits there for them to finish what
    they were given (a health durable drained, quota's last report)."""
    run = _Run(cfg, spec, nc=nc, nats_url=nats_url, database_url=database_url, pool=pool, counter=counter,
               procs=procs, progress=progress, stop=stop or asyncio.Event(), chaos=chaos)
    run.settle = settle
    await run.start_recording()
    try:
        await run.start_services()
        await run.wait_until_answering()
        await run.replay()
        await run.wind_down()
    except Interrupted:
        run.failure = "interrupted"
        raise
    except BaseException as exc:
        run.failure = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        await run.stop_everything()
    return await run.result()


class _Run:
    """One run's moving parts, in the order ``run_once`` uses them: the recorder, the services, the
    replay loop (the fault drill, chaos, the operator's repair), the orderly end and the figures."""

    def __init__(self, cfg: DemoConfig, spec: RunSpec, *, nc: bus.Client, nats_url: str, database_url: str,
                 pool: Any, counter: SubjectCounter, procs: ProcessGroup, progress: Progress,
                 stop: asyncio.Event, chaos: ChaosRunner | None) -> None:
        self.cfg, self.spec, self.nc, self.js = cfg, spec, nc, nc.jetstream()
        self.nats_url, self.database_url, self.pool = nats_url, database_url, pool
        self.counter, self.procs, self.progress, self.stop, self.chaos = counter, procs, progress, stop, chaos
        self.run_log = RunLog(spec.cluster)
        self.followers: list[bus.Follower] = []
        gpuaware_run = spec.label == "gpuaware"
        self.health_on = cfg.health and spec.ours and service_built("gpuaware.services.health_scoring")
        self.plan = plan_faults(cfg, demo_nodes(cfg)) if self.health_on and cfg.telemetry else None
        self.health: dict[str, Any] = {"status": "not in this run" if not self.health_on else "not started"}
        self.alerting = DemoAlerting(cfg, spec) if self.health_on else None
        """Alertmanager and the alert bridge, beside health-scoring (``demo_alerts``)"""
        self.drill = cfg.kill_leader_at_s > 0 and gpuaware_run
        self.forecast_on = spec.ours and service_built("gpuaware.services.forecasting")
        self.quota_on = spec.ours and service_built("gpuaware.services.quota")
        self.exporter_port = free_port() if cfg.telemetry else 0
        self.env = service_env(cfg, spec, nats_url, database_url, self.exporter_port,
                               self.plan.json() if self.plan else "")
        self.logs = cfg.out / "logs"
        self.wall0 = time.monotonic()
        self.clock: list[tuple[float, float]] = []
        self.node_names: list[str] = []
        self.gpus: dict[str, int] = {}
        self.uuid_of: dict[tuple[str, int], str] = {}
        self.n_nodes = 0
        self.telemetry: dict[str, Any] = {"status": "off" if not cfg.telemetry else "not started"}
        self.placements: dict[str, ServiceProcess] = {}
        self.metrics_ports: dict[str, int] = {}
        self.ours: list[ServiceProcess] = []
        """the run's processes that must stay alive (a death fails the run)"""
        self.failure = ""
        self.exit_codes: dict[str, int | None] = {}
        self.virtual_now = VIRTUAL_EPOCH
        self.reached = False
        self.snap_bad: list[str] = []
        self.snap_pods = 0
        self.failover: dict[str, Any] | None = None
        self.chaos_done: list[dict[str, Any]] = []
        self.settle: Callable[[], Awaitable[None]] | None = None
        """``run_once``'s ``settle``"""
        self.forecast: dict[str, Any] = {}

    def _start(self, name: str, module: str, env: dict[str, str], *args: str) -> ServiceProcess:
        return self.procs.start(name, service_command(module, *args), env,
                                self.logs / f"{name}-{self.spec.label}.log")

    async def _answers(self, subject: str, what: str) -> None:
        async def up() -> bool:
            await bus.request(self.nc, subject, {}, dict, timeout=1.0)
            return True

        await wait_for(up, timeout=90.0, what=what, procs=self.ours, stop=self.stop)

    async def start_recording(self) -> None:
        """Fresh loop streams, then follow the binder's and placement's events (and health-scoring's
        in the gpuaware run) into the run's log."""
        spec, js = self.spec, self.js
        await delete_loop_streams(js, ours=self.cfg.own_nats)

        def on_event(ev: Any, d: bus.FollowDelivery) -> None:
            self.run_log.on_event(ev, d.subject)

        self.followers.append(await bus.follow(js, BINDER_CHANNELS, on_event, stream=BINDER.name,
                                               with_suffixes=True, name=f"demo-{spec.label}-binder"))
        self.followers.append(await bus.follow(js, PLACEMENT_CHANNELS, on_event, stream=PLACEMENT.name,
                                               with_suffixes=True, name=f"demo-{spec.label}-placement"))
        if self.health_on:
            self.followers.append(await bus.follow(
                js, HEALTH_CHANNELS, lambda ev, d: self.run_log.on_health(ev, d.subject), stream=ALERTS.name,
                deliver="new", with_suffixes=True, name=f"demo-{spec.label}-health"))
        await self.counter.mark(js)

    async def start_services(self) -> None:
        """The recorder (its durables read the fresh streams from their start), forecasting (answering
        before the binder's first pod), placement (two instances for the
        drill, answering before the binder starts: the twin's clock runs from the binder's start, and a
        first start compiles placement's kernels, up to half a minute on a busy machine, which would
        otherwise pass as virtual hours without a decision), the binder, health-scoring; then, once the
        binder's world names the nodes, quota sized to it and the telemetry agent scraping the twin's GPUs."""
        env = self.env
        recorder = self._start("recorder", "gpuaware.services.recorder", env["recorder"])
        forecaster = (self._start("forecasting", "gpuaware.services.forecasting", env["forecasting"])
                      if self.forecast_on else None)
        instances = ("p1", "p2") if self.drill else ("p1",)
        # forecast_on: placement's metrics are read at the end (how often forecasts changed a decision)
        self.metrics_ports = {inst: free_port() if self.forecast_on else 0 for inst in instances}
        for i, inst in enumerate(instances):
            self.placements[inst] = self._start(
                "placement" if i == 0 else f"placement-{inst}", "gpuaware.services.placement",
                {**env["placement"], "GPUAWARE_PLACEMENT_INSTANCE_ID": inst,
                 "GPUAWARE_PLACEMENT_METRICS_PORT": str(self.metrics_ports[inst])})
        self.ours = [recorder, *self.placements.values()]
        if forecaster is not None:
            # live before the binder's first pod: minutes it sees only while catching up are replayed
            # (stepped, not published), as after a restart
            self.ours.append(forecaster)
            await self._answers(FORECASTING_STATS, "the forecasting service")
        await self._placement_answers()
        self.ours.append(self._start("binder", "gpuaware.services.binder", env["binder"]))
        if self.health_on:
            self.ours.append(self._start("health-scoring", "gpuaware.services.health_scoring", env["health"]))
            self.health["status"] = "running"
            await self._start_alert_bridge()
        await self._read_world()
        if self.quota_on:  # quota (gpuaware run): its tree sized to the cluster the binder announced
            from gpuaware.cli.quota import demo_tree
            Path(env["quota"]["GPUAWARE_QUOTA_TREE"]).write_text(demo_tree(len(self.gpus)))
            self.ours.append(self._start("quota", "gpuaware.services.quota", env["quota"]))
        self._describe_faults()
        if self.exporter_port and self.node_names:
            self._start_agent()

    async def _start_alert_bridge(self) -> None:
        """A real Alertmanager and the alert bridge posting the run's alerts to it, when this machine has
        both; the report says why not otherwise."""
        if self.alerting is None:
            return
        bridge = await self.alerting.start(self._start, self.nats_url)
        if bridge is not None:
            self.ours.append(bridge)
        self.health["alertmanager"] = {"status": self.alerting.status}

    async def _read_world(self) -> None:
        """The binder's nodes and GPUs, from its first answer to ``world.snapshot``."""
        async def world() -> list[WorldSnapshotReply]:
            return await world_snapshot(self.nc, self.spec.cluster, nodes=True, pods=False, timeout=1.0)

        pages = await wait_for(world, timeout=90.0, what="the binder's world.snapshot", procs=self.ours,
                               stop=self.stop)
        for page in pages:
            for node in page.nodes:
                self.n_nodes += 1
                self.node_names.append(node.name)
                for g in node.gpus:
                    self.gpus[g.uuid] = g.memory_mib
                    self.uuid_of[(node.name, g.index)] = g.uuid

    def _describe_faults(self) -> None:
        if self.plan is None:
            return
        self.health["faults"] = [
            {"kind": f.__struct_config__.tag, "label": label, "node": f.node, "gpu_index": f.gpu,
             "gpu_uuid": self.uuid_of.get((f.node, f.gpu), ""), "at_s": f.at_s,
             "until_s": f.at_s + f.duration_s if isinstance(f, ThermalSpec) and f.duration_s else None}
            for f, label in zip(self.plan.specs, self.plan.labels, strict=True)]

    def _start_agent(self) -> None:
        """The telemetry agent reads the twin's GPUs the way it reads a real node's: a dcgm-exporter
        scrape (the binder serves one per twin node), one agent process for all of them."""
        env = self.env["agent"]
        agent = self.procs.start(
            f"telemetry-agent-{self.spec.label}", service_command("gpuaware.services.telemetry", "agent"),
            {**env, "GPUAWARE_TELEMETRY_AGENT_DCGM_NODES": ",".join(self.node_names),
             # one process scrapes every node: about 100 scrapes a second at most,
             # so a 1,213-node twin is read every 12 s instead of saturating the cores
             "GPUAWARE_TELEMETRY_AGENT_FAST_S": f"{max(1.0, len(self.node_names) / 100):g}"},
            self.logs / f"telemetry-agent-{self.spec.label}.log")
        self.telemetry = {"status": "running", "exporter": env["GPUAWARE_TELEMETRY_AGENT_DCGM_URL"],
                          "nodes": len(self.node_names)}
        self.ours.append(agent)

    async def _placement_answers(self) -> None:
        """Placement answers ``placement.explain`` (an instance serves once its engine is ready)."""
        async def explains() -> bool | None:
            req = ExplainRequest(source=SOURCE, emitted_at=time.time(), cluster=self.spec.cluster,
                                 pod_uid="gpuaware-demo-probe", ask_quota=False)
            try:
                await bus.request(self.nc, PLACEMENT_EXPLAIN, req, ExplainReply, timeout=1.0)
            except bus.NoResponders:
                raise  # no instance serves yet: asked again
            except bus.ServiceError:
                return True  # "not known to placement": it answers
            return True

        await wait_for(explains, timeout=90.0, what="placement.explain", procs=self.ours, stop=self.stop)

    async def wait_until_answering(self) -> None:
        """The recorder answers; health-scoring and quota answer when they run (placement answered before
        the binder started)."""
        await self._answers("$SRV.PING.recorder", "the recorder")
        if self.health_on:
            await self._answers(HEALTH_STATS, "health-scoring's health.stats")
        if self.quota_on:
            await self._answers("$SRV.PING.quota", "the quota service")
        if self.alerting is not None and self.alerting.bridge is not None:
            await self._answers(f"$SRV.PING.{BRIDGE_NAME}", "the alert bridge")

    async def replay(self) -> None:
        """Until the twin's clock reaches the window's end (or the wall-clock budget runs out): the
        drill, chaos and the operator's repair at their times, a dead service fails the run."""
        plan = self.plan
        repair = plan.specs[plan.repair] if plan is not None and plan.repair is not None else None
        end = VIRTUAL_EPOCH + self.cfg.window_s
        deadline = time.monotonic() + self.cfg.duration_s * 1.25 + 20.0
        paced_deadline = time.monotonic() + self.cfg.duration_s * PACED_STRETCH + 20.0
        replay0 = time.monotonic()  # chaos steps are timed from here: every service is up
        last_count = 0.0
        while True:
            if self.stop.is_set():
                raise Interrupted(self.spec.label)
            self._maybe_kill_leader()
            if self.chaos is not None:
                self.chaos.tick(time.monotonic() - replay0)
            self._check_alive()
            await self._read_clock()
            if time.monotonic() - last_count >= 2.0:
                last_count = time.monotonic()
                with contextlib.suppress(Exception):
                    await self.counter.since(self.js)
            self.progress(self.spec, self.run_log, self.virtual_now - VIRTUAL_EPOCH, time.monotonic() - self.wall0)
            if repair is not None and plan is not None and self.virtual_now - VIRTUAL_EPOCH >= plan.repair_at_s:
                gpu = self.uuid_of.get((repair.node, repair.gpu), "")
                if gpu in self.run_log.quarantined_now():
                    self.health["repair"] = await operator_repair(self.nc, self.spec.cluster, gpu, repair.node,
                                                                  self.virtual_now)
                    repair = None
            if self.virtual_now >= end:
                self.reached = True
                return
            if time.monotonic() >= deadline and not (time.monotonic() < paced_deadline and self._paced()):
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 0.5)

    def _paced(self) -> bool:
        """The twin runs slower than asked (its pacer slowed it for services that lag): the replay gets
        more wall time, up to ``PACED_STRETCH`` times the duration."""
        speed = effective_speed(self.clock[-20:], self.cfg.speed)
        return speed is not None and speed < 0.9 * self.cfg.speed

    def _maybe_kill_leader(self) -> None:
        """The fault drill: SIGKILL the instance that made the last decision (no hand-over, the lease
        must expire), once, ``kill_leader_at_s`` wall seconds into the run."""
        if not self.drill or self.failover is not None or not self.run_log.decision_times \
                or time.monotonic() - self.wall0 < self.cfg.kill_leader_at_s:
            return
        leader = self.run_log.decision_times[-1][1].rsplit("/", 1)[-1]
        victim = self.placements.get(leader)
        if victim is None or victim.proc is None:
            return
        victim.proc.kill()
        self.failover = {"killed": leader, "process": victim.name, "killed_at": time.time(),
                         "decisions_before": len(self.run_log.decision_times)}
        self.ours = [p for p in self.ours if p is not victim]
        log.info("fault drill: placement leader %s killed", leader)

    def _check_alive(self) -> None:
        held = self.chaos.held_down() if self.chaos is not None else set()
        dead = [p for p in self.ours if not p.alive() and p.name not in held]
        if dead:
            raise RuntimeError(f"{dead[0].name} exited during the run; its log ({dead[0].log_path}):\n"
                               f"{dead[0].log_tail()}")

    async def _read_clock(self) -> None:
        with contextlib.suppress(bus.RequestTimeout, bus.NoResponders, bus.ServiceError):
            page = (await world_snapshot(self.nc, self.spec.cluster, nodes=False, pods=False, timeout=2.0))[0]
            self.virtual_now = page.at
            self.clock.append((time.time(), self.virtual_now))

    async def _sync_followers(self) -> None:
        for f in self.followers:
            await f.sync(timeout=5.0)

    async def wind_down(self) -> None:
        """What chaos took down is back, the world's own view, explanations for unexplained pending
        pods, the services' counters; the binder stops first."""
        nc, cluster = self.nc, self.spec.cluster
        if self.chaos is not None:
            self.chaos_done = await self.chaos.finish(timeout=90.0)
        await self._sync_followers()
        with contextlib.suppress(bus.RequestTimeout, bus.NoResponders, bus.ServiceError):
            final = await world_snapshot(nc, cluster, nodes=False, pods=True, timeout=5.0)
            self.snap_bad, self.snap_pods = snapshot_violations(final, self.gpus)
        # the world stops before the last explanations: a decision the binder applies now may still
        # preempt pods and re-queue them, and a pod re-queued after placement answered for the pending
        # ones would be left with no verdict. Placement then sees the binder's last events.
        self.exit_codes.update(await asyncio.to_thread(self.procs.stop, "binder", 15.0))
        await self._sync_followers()
        await asyncio.sleep(1.0)  # placement decides (or parks) what the binder's last events re-queued
        await self._sync_followers()
        await explain_pending(nc, cluster, self.run_log, self.cfg.explain_limit)
        if self.health_on:
            with contextlib.suppress(bus.RequestTimeout, bus.NoResponders, bus.ServiceError):
                self.health["stats"] = await bus.request(nc, HEALTH_STATS, {}, dict, timeout=5.0)
        if self.alerting is not None:
            self.health["alertmanager"] = await self.alerting.finish(
                {a.fingerprint for a in self.run_log.alerts_resolved})
        if self.forecast_on:
            self.forecast["status"] = "running"
            self.forecast["stats"] = await self._forecasting_settled()
            self.forecast["placement"] = await forecast_effect(self.placements, self.metrics_ports)

    async def _forecasting_settled(self, bound_s: float = 30.0) -> dict[str, Any]:
        """Forecasting's counters once it has worked through what the binder published: at the demo's
        speed (a virtual day in under a minute) its demand minutes may trail the replay, so its stats are
        read until two reads a second apart agree (at most ``bound_s``); {} when it does not answer."""
        stats: dict[str, Any] = {}
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            try:
                now = await bus.request(self.nc, FORECASTING_STATS, {}, dict, timeout=5.0)
            except (bus.RequestTimeout, bus.NoResponders, bus.ServiceError):
                return stats
            if stats and all(now.get(k) == stats.get(k) for k in ("demand_minutes", "windows", "runtimes_learnt")):
                return now
            stats = now
            await asyncio.sleep(1.0)
        return stats

    async def stop_everything(self) -> None:
        """Every process of the run stopped (the binder last, when a run was cut short), the followers
        read to their end and stopped, the recorder once it stored what the streams hold, the run's
        durable consumers deleted."""
        procs = self.procs
        if self.settle is not None and not self.failure:
            for name in [p.name for p in procs.processes if p.name.startswith(FEEDERS)]:
                self.exit_codes.update(await asyncio.to_thread(procs.stop, name, 15.0))
            try:
                await self.settle()
            except Exception as exc:  # the services are stopped all the same
                self.failure = f"settling: {type(exc).__name__}: {exc}"
        for name in [p.name for p in procs.processes if p.name.startswith(STOPPED_AFTER_RUN)]:
            self.exit_codes.update(await asyncio.to_thread(procs.stop, name, 15.0))
        if any(p.name == "binder" for p in procs.processes):  # a run cut short (stopped already otherwise)
            await asyncio.sleep(1.0)  # decisions already published reach the binder
            self.exit_codes.update(await asyncio.to_thread(procs.stop, "binder", 15.0))
        if self.alerting is not None:
            await self.alerting.stop()
        with contextlib.suppress(Exception):
            await self._sync_followers()
        for f in self.followers:
            with contextlib.suppress(Exception):
                await f.stop()
        await self._stop_recorder()
        with contextlib.suppress(Exception):
            await delete_run_consumers(self.js, self.spec.cluster)
        if self.failure and self.failure != "interrupted":
            log.error("run %s failed: %s", self.spec.label, self.failure)

    async def _stop_recorder(self) -> None:
        """Stop the recorder once its durables have nothing left to deliver or acknowledge (everything the
        streams hold is in PostgreSQL), or after ``RECORDER_DRAIN_S`` (a database still away: the report's
        comparison of placement_events with the bus then shows what is missing)."""
        recorder = next((p for p in self.procs.processes if p.name == "recorder"), None)
        if recorder is None:
            return
        if not self.stop.is_set():
            try:
                await wait_for(lambda: recorder_caught_up(self.js, self.spec.cluster), timeout=RECORDER_DRAIN_S,
                               what="the recorder storing the run's events", procs=[recorder], stop=self.stop)
            except (TimeoutError, RuntimeError, Interrupted) as exc:
                log.error("placement_events may miss events of run %s: %s", self.spec.label, exc)
        self.exit_codes.update(await asyncio.to_thread(self.procs.stop, "recorder", 15.0))

    async def result(self) -> RunResult:
        """The run's figures: messages and rows per subject, the drill's, quota's and the forecasts'."""
        spec = self.spec
        messages = await self.counter.since(self.js)
        async with self.pool.connection() as conn:
            db = await count_placement_events(conn, spec.cluster)
        self.progress(spec, self.run_log, self.virtual_now - VIRTUAL_EPOCH, time.monotonic() - self.wall0)
        failover = (failover_figures(self.failover, self.run_log, self.exit_codes)
                    if self.failover is not None else None)
        return RunResult(spec=spec, log=self.run_log, gpus=self.gpus, nodes=self.n_nodes, started_at=VIRTUAL_EPOCH,
                         virtual_end=self.virtual_now, wall_s=time.monotonic() - self.wall0,
                         reached_end=self.reached, messages=messages, db=db, snapshot_violations=self.snap_bad,
                         snapshot_pods=self.snap_pods, exit_codes=self.exit_codes,
                         services={"placement": spec.policy, "binder": "twin"}, failure=self.failure,
                         failover=failover, node_names=self.node_names, clock=self.clock,
                         telemetry=self.telemetry, health=self.health, quota=await self._quota_summary(),
                         chaos=self.chaos_done, forecast=await self._forecast_accuracy())

    async def _quota_summary(self) -> dict[str, Any]:
        if not self.quota_on:
            return {}
        from gpuaware.cli.quota import demo_summary
        try:
            return await demo_summary(self.pool, self.spec.cluster)
        except Exception as exc:  # the report says what failed; the run's other figures stand
            return {"status": f"no summary: {type(exc).__name__}: {exc}"}

    async def _forecast_accuracy(self) -> dict[str, Any]:
        forecast = self.forecast
        if forecast.get("status") != "running":
            return forecast
        from gpuaware.cli.demo_forecast import demand_accuracy
        forecast["model"] = dict(self.cfg.demand_model)
        try:
            forecast["accuracy"] = await demand_accuracy(self.pool, self.spec.cluster, VIRTUAL_EPOCH)
        except Exception as exc:  # the report says what failed; the run's other figures stand
            forecast["accuracy"] = {"status": f"not scored: {type(exc).__name__}: {exc}"}
        return forecast
