"""The forecasting service's state and its event handlers: windows of utilisation values stepped
through the utilisation model, closed minutes of demand through the demand model (and, every 10
minutes of their clock, the hours-ahead forecasts of ``forecast.hours``), finished runs learnt for
durations, and the registry polled for newer models (see ``handlers`` for the subjects).

Two replicas, one leader (a NATS KV lease per cluster, ``lease_bucket``): both follow the same streams
and step the same series (a standby is warm: nothing to rebuild at takeover), but only the leader
publishes forecasts and drift alerts and stores points. A standby keeps what it would have published
for ``handover_s`` (wall seconds). On takeover the new leader reads the FORECAST stream's last
forecast per subject (the predecessor's last word for each node and for demand: it published each
subject's windows in order) and publishes its kept forecasts from that window on, then goes on live;
each forecast carries a message id made of its subject, model, step and origin, so one the predecessor
stored already (its last window, or every kept one when the stream could not be read in time) is
stored once. So a window closed while nobody led is published by the new leader, and none twice.
A mark holds only for its path, (subject, step): the demand subject carries three, on two clocks
(the minute path and the hours path on the pod events' time, the utilisation model's per-node
aggregates on the telemetry's), so the last forecast read there says nothing of the other two, whose
kept forecasts are all published (the message ids keep them single).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from gpuaware import bus, forecast
from gpuaware.forecast import (
    DemandBook,
    DemandRow,
    Drift,
    DurationPredictor,
    Fingerprint,
    HoursAhead,
    HoursStep,
    ModelError,
    Server,
    StreamingModel,
)
from gpuaware.forecast import fingerprint as job_fingerprint
from gpuaware.runtime import ReloadAlarm, supervise
from gpuaware.schemas import (
    BINDER,
    FORECAST,
    TELEMETRY,
    AlertRaised,
    AlertResolved,
    DemandPredicted,
    DurationReply,
    DurationRequest,
    ForecastStats,
    GpuRolledUp,
    GpuSampled,
    GpuUtilPredicted,
    NodeInventory,
    PodBindFailed,
    PodFinished,
    PodOutcome,
    PodPending,
    PodPreempted,
)
from gpuaware.services.forecasting.drift import drift_alert
from gpuaware.services.forecasting.settings import ForecastingSettings

log = logging.getLogger(__name__)

ROLLED = bus.event_channel(GpuRolledUp)
SAMPLED = bus.event_channel(GpuSampled)
INVENTORY = bus.event_channel(NodeInventory)
GPU_OUT = bus.event_channel(GpuUtilPredicted)
DEMAND_OUT = bus.event_channel(DemandPredicted)
RAISED = bus.event_channel(AlertRaised)
RESOLVED = bus.event_channel(AlertResolved)
SAMPLE_GRACE_S = 0.5
"""scaled time: how long (telemetry seconds) a window of samples stays open after it ends for the
rest of an agent's scrape round to arrive"""
UTIL, DEMAND = "util", "demand"
LATENCY = forecast.class_key(forecast.LATENCY_SENSITIVE)
BAND_WINDOW = {UTIL: 360, DEMAND: 1440}
BAND_EVERY = {UTIL: 30, DEMAND: 10}
"""each slot's band calibration (``Server``'s ``band_window`` / ``band_every``): a GPU fleet has a series
per GPU, so its bands look back six hours and are recomputed every 30 steps (10,000 GPUs: about 50 MB);
demand has a handful of series and keeps a day"""
QUANTILES: dict[str, tuple[float, ...] | None] = {UTIL: None, DEMAND: (0.1, 0.5, 0.9)}
"""each slot's published quantiles (``Server``'s ``quantiles``): demand adds a p10 to its p50 and p90 (the
band a reader judges a forecast by: how often the actual fell inside it); utilisation keeps the model's
own (p50, p90), as placement reads only the p90 and a p10 would grow every node's per-GPU message by half"""
POD_EVENTS = (bus.event_channel(PodPending), bus.event_channel(PodFinished),
              bus.event_channel(PodPreempted), bus.event_channel(PodBindFailed))
WRITER_DRAIN_S = 30.0
"""how long ``stop`` waits for the handlers already delivered to store their forecasts"""
MARKS_TIMEOUT_S = 3.0
"""how long a new leader reads FORECAST's last forecast per subject before it publishes what it kept
(past it: everything kept is published, and the message ids keep what was stored already single)"""
CATCH_UP_S = 30.0
"""at most this long an instance replays the streams before it campaigns for the lease"""
KEPT_MAX = 50_000
"""forecasts a standby keeps at most (the oldest go first)"""


def forecast_id(subject: str, ev: GpuUtilPredicted | DemandPredicted) -> str:
    """The message id of a forecast: the same window's forecast by any instance has the same id."""
    return f"fc/{subject}/{ev.model}/{ev.step_s:g}/{ev.issued_at:.6f}"


class ForecastService:
    """One forecasting instance's state: the models served, the open windows of utilisation values,
    the demand book and the duration predictor; ``handlers.mount`` wires it to the bus."""

    def __init__(self, settings: ForecastingSettings, js: Any, pool: Any, instance: str) -> None:
        self.settings = settings
        self.js = js
        self.pool = pool
        self.instance = instance
        self.source = f"{settings.service_name}/{instance}"
        self.model_alarm = ReloadAlarm(js, config="model registry", service=settings.service_name,
                                       cluster=settings.cluster, source=self.source)
        """a registry poll that failed, or a newest model refused, counted and alerted until one serves"""
        self.refused: dict[str, str] = {}
        """slot -> why its newest registry version was refused (the one served before stays)"""
        self.scaled = settings.time_scale != 1.0
        """the GPUs live faster than their telemetry's clock (a twin): windows from samples, not rollups"""
        self.close_lag = SAMPLE_GRACE_S * settings.time_scale if self.scaled else 0.0
        """a window closes once a value arrives for one starting this much later (the GPUs' seconds)"""
        self.close_after_s = SAMPLE_GRACE_S if self.scaled else settings.flush_s
        """... or this long (telemetry seconds) after its first value"""
        self.servers = {UTIL: Server(None, "", unusable="no model in the registry", time_scale=settings.time_scale,
                                     quantiles=QUANTILES[UTIL], band_window=BAND_WINDOW[UTIL],
                                     band_every=BAND_EVERY[UTIL]),
                        DEMAND: Server(None, "", unusable=f"no {settings.demand_model_name!r} model in the registry",
                                       quantiles=QUANTILES[DEMAND], band_window=BAND_WINDOW[DEMAND],
                                       band_every=BAND_EVERY[DEMAND])}
        self.versions: dict[str, int | None] = {UTIL: None, DEMAND: None}
        self.book = DemandBook(step_s=60.0)
        self.hours = (HoursAhead(settings.hours_horizon_list(), history_days=settings.hours_history_days,
                                 quantiles=QUANTILES[DEMAND] or (0.1, 0.5, 0.9), time_scale=self.demand.time_scale)
                      if settings.hours_ahead else None)
        """demand hours ahead, on the demand series' clock (the minute path's, scaled as it is)"""
        self.latency_classes = settings.latency_class_set()
        self.durations = DurationPredictor()
        self.jobs: dict[str, Fingerprint] = {}
        """pods seen pending and not gone yet: their fingerprint, learnt from when they finish"""
        self.gpu_models: dict[str, str] = {}
        """GPU uuid -> model name, from the nodes' inventories"""
        self.pending: dict[float, list[tuple[str, list[tuple[str, str, float]]]]] = {}
        """window start (the GPUs' time) -> [(node, [(node, gpu uuid, util %)])] reported in it"""
        self.flushers: dict[float, asyncio.TimerHandle] = {}
        self.lock = asyncio.Lock()
        self.counts = {"windows": 0, "published": 0, "late_windows": 0, "store_failures": 0, "reloads": 0,
                       "drift_alerts": 0, "demand_minutes": 0, "demand_published": 0, "runtimes_learnt": 0,
                       "publish_failures": 0, "window_failures": 0}
        self.drift_started: float | None = None
        self.follower: Any = None
        self.pod_follower: Any = None
        self.sample_follower: Any = None
        self._reloader: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.lease: bus.LeaderLease | None = None
        self.publishing = False
        """this instance leads and has published what it kept: forecasts go out (else they are kept)"""
        self.kept: deque[tuple[float, str, GpuUtilPredicted | DemandPredicted]] = deque()
        """a standby's forecasts not published: (monotonic time made, subject, forecast), oldest first"""
        self.takeovers: list[dict[str, Any]] = []
        """each takeover: kept forecasts, how many published, how many the predecessor had published"""

    # --- registry ------------------------------------------------------------------------------------

    async def reload(self) -> bool:
        """Serve the registry's newest versions (the utilisation model and the demand model) where they
        are newer than the ones served; True if either changed."""
        changed = await self._reload(UTIL)
        return await self._reload(DEMAND) or changed

    async def _reload(self, slot: str) -> bool:
        st = self.settings
        name, exclude = ((st.model_name or None, st.demand_model_name) if slot == UTIL
                         else (st.demand_model_name, None))
        scale = st.time_scale if slot == UTIL else 1.0  # demand runs on the pod events' own clock
        async with self.pool.connection() as conn:
            newest = await forecast.latest_version_async(conn, name, exclude=exclude)
            if newest is None or newest == self.versions[slot]:
                return False
            entry = await forecast.latest_async(conn, name, exclude=exclude)
        if entry is None:
            return False
        try:
            model = StreamingModel.load(entry.onnx)
        except ModelError as exc:
            log.warning("registry model %s refused: %s", entry.label, exc)
            self.versions[slot] = entry.version  # not retried until a newer version appears
            self.refused[slot] = f"registry model {entry.label} refused: {exc}"
            self.model_alarm.failed(self.refused[slot])
            if self.servers[slot].model is None:
                self._swap(slot, Server(None, entry.label, unusable=f"{entry.label} unusable: {exc}",
                                        time_scale=scale, quantiles=QUANTILES[slot], band_window=BAND_WINDOW[slot],
                                        band_every=BAND_EVERY[slot]))
            return False
        self.versions[slot] = entry.version
        self.refused.pop(slot, None)
        self._swap(slot, Server(model, entry.label, drift_halflife=st.drift_halflife,
                                drift_min_points=st.drift_min_points, drift_margin=st.drift_margin,
                                time_scale=scale, quantiles=QUANTILES[slot], band_window=BAND_WINDOW[slot],
                                band_every=BAND_EVERY[slot]))
        self.counts["reloads"] += 1
        log.info("serving %s (%s)", entry.label, slot)
        return True

    def _swap(self, slot: str, server: Server) -> None:
        server.adopt(self.servers[slot])
        self.servers[slot] = server

    @property
    def server(self) -> Server:
        """The utilisation model's server (per-GPU and per-node forecasts from rollups)."""
        return self.servers[UTIL]

    @property
    def demand(self) -> Server:
        """The demand model's server (GPUs requested per queue, from the binder's pod events)."""
        return self.servers[DEMAND]

    async def _reload_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reload_s)
            try:
                await self.reload()
            except Exception as exc:  # the registry unreachable, or any other failure: keep serving what is loaded
                self.model_alarm.failed(exc)
            else:
                if not self.refused:
                    self.model_alarm.succeeded()

    # --- rollups -------------------------------------------------------------------------------------

    async def _on_telemetry(self, msg: GpuRolledUp | NodeInventory | GpuSampled, delivery: Any) -> None:
        if msg.cluster != self.settings.cluster:
            return
        if isinstance(msg, NodeInventory):
            self.gpu_models.update({g.uuid: g.model for g in msg.gpus})
        elif isinstance(msg, GpuSampled):
            await self._on_sample(msg, delivery)
        elif not self.scaled:  # a scaled clock's rollups span many of its GPUs' minutes: samples serve
            await self._on_rollup(msg, delivery)

    async def _on_rollup(self, msg: GpuRolledUp, delivery: Any) -> None:
        if msg.window.value != "1m":
            return
        gpus = [(msg.node, g.gpu_uuid, g.util_pct.mean) for g in msg.gpus if g.util_pct is not None]
        await self._buffer(msg.window_start, msg.node, gpus, delivery)

    async def _on_sample(self, msg: GpuSampled, delivery: Any) -> None:
        """A sample (scaled time only): its value counts for the GPUs' minute it falls in."""
        gpus = [(msg.node, uuid, util) for uuid, util in zip(msg.gpu_uuid, msg.util_pct, strict=False)
                if util is not None]
        step = self.server.step_s
        await self._buffer(math.floor(msg.sampled_at * self.settings.time_scale / step) * step, msg.node, gpus,
                           delivery)

    async def _buffer(self, w: float, node: str, gpus: list[tuple[str, str, float]], delivery: Any) -> None:
        """One node's values for window ``w`` (its start on the GPUs' clock); a later window closes the
        earlier ones (``close_lag`` earlier), and a timer the last."""
        last = self.server.last_window
        if last is not None and w <= last:
            self.counts["late_windows"] += 1
            return
        self.pending.setdefault(w, []).append((node, gpus))
        for earlier in sorted(x for x in self.pending if x < w - self.close_lag):
            await self._flush(earlier, publish=not delivery.replay)
        if w not in self.flushers:
            loop = asyncio.get_running_loop()
            self.flushers[w] = loop.call_later(self.close_after_s, self._spawn_flush, w)

    def _spawn_flush(self, w: float) -> None:
        task = asyncio.create_task(self._flush_through(w), name=f"forecast window {w:.0f}")
        self._tasks.add(task)
        task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        """A window timer's task ended: a failure is counted and logged here, never left unobserved (the
        windows after it close as usual)."""
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.counts["window_failures"] += 1
            log.error("%s failed: %s: %s", task.get_name(), type(exc).__name__, exc, exc_info=exc)

    async def _flush_through(self, w: float) -> None:
        """Window ``w``'s timer: it and every earlier window still open, oldest first (a window's
        first value may arrive after a later window's)."""
        for x in sorted(x for x in self.pending if x <= w):
            await self._flush(x, publish=True)

    async def _flush(self, w: float, *, publish: bool) -> None:
        async with self.lock:
            msgs = self.pending.pop(w, None)
            timer = self.flushers.pop(w, None)
            if timer is not None:
                timer.cancel()
            if not msgs:
                return
            gpus = [g for _node, node_gpus in msgs for g in node_gpus]
            nodes = {node for node, _ in msgs}
            server = self.server
            result = server.step(w, gpus, self.gpu_models)
            self.counts["windows"] += 1
            if not publish:
                return
            # the window closed: its end is the forecast origin, on the telemetry's clock
            issued = (w + server.step_s) / self.settings.time_scale
            events = server.events(result, self.settings.cluster, issued, nodes, time.time(), self.source)
            self.counts["published"] += await self._publish_each(w, events)
            for change in server.drift():
                await self._alert(server, change)
            if not self.scaled:  # a scaled window's targets fall between stored times: published only
                await self._store(server.points(result, issued, nodes), server.actuals(issued, gpus, self.gpu_models))

    async def _publish_each(self, w: float, events: Sequence[GpuUtilPredicted | DemandPredicted]) -> int:
        """Publish every forecast of window ``w``, each on its own: one that cannot be published (a NATS
        timeout, a refused subject) is counted and the others still go out. Returns how many did."""
        sent, failed, first = 0, 0, ""
        for ev in events:
            channel: bus.Channel[Any] = (GPU_OUT.at(self.settings.cluster, ev.node) if isinstance(ev, GpuUtilPredicted)
                                         else DEMAND_OUT.at(self.settings.cluster))
            if not self.publishing:  # a standby: kept for a takeover
                self._keep(channel.subject, ev)
                continue
            try:
                await bus.publish(self.js, channel, ev, msg_id=forecast_id(channel.subject, ev))
                sent += 1
            except Exception as exc:
                failed += 1
                first = first or f"{channel.subject}: {type(exc).__name__}: {exc}"
        if failed:
            self.counts["publish_failures"] += failed
            log.warning("window %.0f: %d of %d forecasts not published (first: %s)", w, failed, len(events), first)
        return sent

    async def _store(self, points: list[Any], actuals: list[tuple[str, float, float]]) -> None:
        if not self.settings.store_points or not self.publishing:  # the leader's alone
            return
        try:
            async with self.pool.connection() as conn:
                await forecast.store_points_async(conn, points, actuals)
        except Exception as exc:  # forecasts already left; losing their record is logged, counted
            self.counts["store_failures"] += 1
            log.warning("storing forecasts failed: %s: %s", type(exc).__name__, exc)

    # --- demand --------------------------------------------------------------------------------------

    async def _on_pod(self, ev: Any, delivery: Any) -> None:
        if ev.cluster != self.settings.cluster:
            return
        book = self.book
        if isinstance(ev, PodPending):
            groups = (LATENCY,) if ev.priority_class in self.latency_classes else ()
            rows = book.pending(ev.pod_uid, ev.queue, ev.gpu_milli_total / 1000.0, ev.submitted_at, groups)
            self.jobs[ev.pod_uid] = job_fingerprint(ev.pod_name, ev.queue, "", ev.num_gpu)
        elif isinstance(ev, PodFinished):
            rows = book.left(ev.pod_uid, ev.finished_at)
            fp = self.jobs.pop(ev.pod_uid, None)
            if fp is not None and ev.outcome == PodOutcome.SUCCEEDED and ev.started_at is not None:
                self.durations.observe(fp, ev.finished_at - ev.started_at)
                self.counts["runtimes_learnt"] += 1
        elif isinstance(ev, PodPreempted):
            rows = book.left(ev.pod_uid, ev.preempted_at, requeued=ev.requeued)
            if not ev.requeued:
                self.jobs.pop(ev.pod_uid, None)
        elif isinstance(ev, PodBindFailed):
            rows = book.left(ev.pod_uid, ev.failed_at, requeued=ev.transient)
            if not ev.transient:
                self.jobs.pop(ev.pod_uid, None)
        else:
            return
        self._writing += 1  # stop() drains these before the pool closes
        try:
            for row in rows:
                await self._demand_step(row, publish=not delivery.replay)
        finally:
            self._writing -= 1
            if not self._writing and self._drained is not None:
                self._drained.set()

    async def _demand_step(self, row: DemandRow, *, publish: bool) -> None:
        """One closed minute of demand: every queue's series one step, the forecast published (kept, by a
        standby, replayed minutes included: ``_publish_kept`` publishes those past the predecessor's last)."""
        async with self.lock:
            cluster = self.settings.cluster
            server = self.demand
            result = server.step_demand(row.start, cluster, row.demand)
            self.counts["demand_minutes"] += 1
            hours = self._hours_step(row)
            if not publish and self.publishing:
                # a leader's replay is what it (or its predecessor) published already; a standby keeps
                # even the minutes it replays: the leader may not have reached them when it died
                return
            issued = row.start + server.step_s
            events = server.demand_events(result, cluster, issued, time.time(), self.source)
            self.counts["demand_published"] += await self._publish_each(row.start, events)
            for change in server.drift():
                await self._alert(server, change)
            # an actual is keyed by the time it was observed (the minute's end), as forecasts' targets are
            await self._store(server.points(result, issued, [cluster]), server.demand_actuals(issued, cluster,
                                                                                              row.demand))
            if hours is not None and self.hours is not None:
                # the same origin as the minute path's forecasts (a 10-minute boundary), on the issuer's clock
                issued = hours.t / self.hours.time_scale
                events = self.hours.events(hours, cluster, issued, time.time(), self.source)
                self.counts["demand_published"] += await self._publish_each(row.start, events)
                await self._store(self.hours.points(hours, cluster, issued), [])  # actuals: the minute path's

    def _hours_step(self, row: DemandRow) -> HoursStep | None:
        """The closed minute for the hours-ahead forecasts: a step when it ends on a 10-minute boundary.
        A failure there is logged and counted (``window_failures``); the minute path goes on."""
        if self.hours is None:
            return None
        try:
            return self.hours.observe(row.start + self.book.step_s, row.demand)
        except Exception as exc:
            self.counts["window_failures"] += 1
            log.error("hours-ahead demand step at %.0f failed: %s: %s", row.start, type(exc).__name__, exc,
                      exc_info=exc)
            return None

    async def _alert(self, server: Server, change: Drift) -> None:
        if not self.publishing:  # the leader's alone (a standby's models drift as the leader's do)
            return
        now = time.time()
        if change.raised:
            self.drift_started = now
        event = drift_alert(server.model_label, change, cluster=self.settings.cluster, source=self.source,
                            now=now, started_at=self.drift_started or now)
        channel: bus.Channel[Any] = RAISED if isinstance(event, AlertRaised) else RESOLVED
        try:
            await bus.publish(self.js, channel.at(self.settings.cluster), event)
        except Exception as exc:  # the forecasts of the window went out; the next change is published again
            self.counts["publish_failures"] += 1
            log.warning("drift alert of %s not published: %s: %s", server.model_label, type(exc).__name__, exc)
            return
        self.counts["drift_alerts"] += 1

    # --- leadership ----------------------------------------------------------------------------------

    def _keep(self, subject: str, ev: GpuUtilPredicted | DemandPredicted) -> None:
        now = time.monotonic()
        kept = self.kept
        kept.append((now, subject, ev))
        while kept and (kept[0][0] < now - self.settings.handover_s or len(kept) > KEPT_MAX):
            kept.popleft()

    async def _on_lease(self, leading: bool) -> None:
        if not leading:
            self.publishing = False
            log.info("forecasting stands by for cluster %s (forecasts kept, not published)", self.settings.cluster)
            return
        async with self.lock:  # no window closes meanwhile: the kept forecasts go first, in order
            await self._publish_kept()
            self.publishing = self.lease is not None and self.lease.leading

    async def _marks(self) -> dict[tuple[str, float], float] | None:
        """FORECAST's last forecast origin per subject of this cluster (the predecessor's last window of
        each), keyed by its path, (subject, step): the only path that mark speaks for (module docstring);
        None when the stream could not be read within ``MARKS_TIMEOUT_S``."""
        marks: dict[tuple[str, float], float] = {}

        def on(ev: GpuUtilPredicted | DemandPredicted, d: bus.FollowDelivery) -> None:
            path = (d.subject, ev.step_s)
            marks[path] = max(marks.get(path, ev.issued_at), ev.issued_at)

        cluster = self.settings.cluster
        try:
            follower = await asyncio.wait_for(bus.follow(
                self.js, [GPU_OUT.at(cluster), DEMAND_OUT.at(cluster)], on, stream=FORECAST.name,
                deliver="last_per_subject", with_suffixes=True, name="forecasting-takeover"), MARKS_TIMEOUT_S)
        except Exception as exc:
            log.warning("takeover: FORECAST unreadable (%s: %s); publishing every kept forecast", type(exc).__name__, exc)
            return None
        try:
            await asyncio.wait_for(follower.caught_up.wait(), MARKS_TIMEOUT_S)
        except TimeoutError:
            log.warning("takeover: FORECAST not read within %g s; publishing every kept forecast", MARKS_TIMEOUT_S)
            return None
        finally:
            with contextlib.suppress(Exception):
                await follower.stop(delete=True)
        return marks

    async def _publish_kept(self) -> None:
        """A new leader's first act: the kept forecasts its predecessor had not published (module docstring)."""
        kept, self.kept = list(self.kept), deque()
        marks = await self._marks() if kept else {}
        todo = [ev for _t, subject, ev in kept
                if marks is None or ev.issued_at >= marks.get((subject, ev.step_s), -math.inf)]
        sent = 0
        self.publishing = True  # `_publish_each` publishes from here on
        for ev in todo:
            n = await self._publish_each(ev.issued_at, [ev])
            sent += n
            self.counts["published" if isinstance(ev, GpuUtilPredicted) else "demand_published"] += n
        record = {"kept": len(kept), "published": sent, "marks": None if marks is None else len(marks)}
        self.takeovers.append(record)
        log.info("forecasting leads cluster %s: %d kept forecasts, %d published (the predecessor's last "
                 "window per subject read: %s)", self.settings.cluster, len(kept), sent,
                 "no" if marks is None else len(marks))

    # --- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self.reload()
        except Exception as exc:
            log.warning("model registry unreadable at start (serving persistence): %s", exc)
        self._reloader = supervise("forecasting reload", self._reload_loop)
        self.follower = await bus.follow(self.js, [INVENTORY.at(self.settings.cluster), ROLLED.at(self.settings.cluster)],
                                         self._on_telemetry, stream=TELEMETRY.name, deliver="all",
                                         with_suffixes=True, name="forecasting-rollups")
        if self.scaled:  # live samples only: a restarted instance's series start again
            self.sample_follower = await bus.follow(self.js, [SAMPLED.at(self.settings.cluster)], self._on_telemetry,
                                                    stream=TELEMETRY.name, deliver="new", with_suffixes=True,
                                                    name="forecasting-samples")
        # the binder publishes pod events on the base subjects (any routing suffix is optional): every
        # cluster's, filtered by the events' own ``cluster``
        self.pod_follower = await bus.follow(self.js, list(POD_EVENTS), self._on_pod,
                                             stream=BINDER.name, deliver="all", with_suffixes=True,
                                             name="forecasting-pods")
        st = self.settings
        # warm before it may lead: a restarted instance replays the retained rollups and pod events first
        # (their windows are stepped, never published nor kept), so the instance that stood by wins
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(self.follower.caught_up.wait(), self.pod_follower.caught_up.wait()),
                                   CATCH_UP_S)
        self.lease = bus.LeaderLease(self.js, st.lease_bucket, st.cluster, self.instance,
                                     ttl_s=st.lease_ttl_s, poll_s=st.lease_poll_s, on_change=self._on_lease)
        await self.lease.start()
        # a lone instance wins at its first try: it publishes from the start, as it always did
        await self.lease.wait_leading(timeout=4 * st.lease_poll_s)

    async def stop(self) -> None:
        if self.lease is not None:  # handed over at once: a standby publishes the next window
            await self.lease.stop(release=True)
        if self._reloader is not None:
            self._reloader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloader
        for follower, delete in ((self.follower, True), (self.sample_follower, True), (self.pod_follower, False)):
            if follower is not None:
                with contextlib.suppress(Exception):
                    await follower.stop(delete=delete)  # BINDER's consumers are not ours to delete
        for t in self.flushers.values():
            t.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(Exception):
                await task
        await self._drain_writers()
        await self.pool.close()

    _writing = 0
    """pod-event handlers still stepping demand, publishing and storing forecasts"""
    _drained: asyncio.Event | None = None

    async def _drain_writers(self) -> None:
        """Wait (at most ``WRITER_DRAIN_S``) for the handlers already delivered to store what they stepped:
        the pool closes after them, not under them (their forecasts are not lost to ``PoolClosed``)."""
        if not self._writing:
            return
        self._drained = asyncio.Event()
        try:
            await asyncio.wait_for(self._drained.wait(), WRITER_DRAIN_S)
        except TimeoutError:
            log.warning("stopping with %d pod-event handler(s) still writing after %g s", self._writing,
                        WRITER_DRAIN_S)

    def duration(self, req: DurationRequest) -> DurationReply:
        seconds, basis = self.durations.predict(job_fingerprint(req.pod_name, req.queue, req.image, req.num_gpu))
        return DurationReply(source=self.source, emitted_at=time.time(), cluster=self.settings.cluster,
                             seconds=seconds, basis=basis, runs_observed=self.counts["runtimes_learnt"])

    def stats(self) -> ForecastStats:
        s, d = self.server, self.demand
        return ForecastStats(model=s.model_label if s.model else "", unusable="" if s.model else (s.unusable or ""),
                             series=len(s.index), demand_model=d.model_label if d.model else "",
                             demand_unusable="" if d.model else (d.unusable or ""), demand_series=len(d.index),
                             **self.counts)


