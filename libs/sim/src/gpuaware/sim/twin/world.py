"""The digital twin: the world our services act on, holding the truth and refusing the impossible.

It replaces the Kubernetes API and the GPUs, never a service: it does not choose where a pod goes.
It knows which pods exist (a workload arriving over virtual time), which are pending, bound or gone,
and exactly which slice of which GPU each bound pod holds. ``bind`` applies a decision somebody else
made and refuses, with a reason code, what the real world would refuse: an unknown or finished pod,
one already bound, an unknown node or GPU, a slice that does not match the pod, or more than a GPU
(compute or memory) or a node (CPU, memory) has. Nothing is ever over-allocated, whatever it is told.

Time is virtual and passed in: ``advance(until)`` processes the events due by ``until`` in
(time, sequence) order and returns them - arrivals, departures of bound pods at the end of their
work, answers to checkpoint requests. ``next_event_at()`` says when the next one is due, so a
driver can sleep (``AcceleratedClock``) or jump (``VirtualClock``) exactly there. Given the same
nodes, workload, seed and sequence of calls, a twin produces the same events: no wall clock, no
global random state (checkpoint delays are a hash of the seed and the request id).

Work is conserved honestly: a bound pod departs after its remaining work; an eviction of a pod that
checkpointed keeps its progress, one that did not loses it and starts over when bound again. The
workers of an elastic job (a gang with ``gang_max_members`` above its minimum) share one job's work
instead (``elastic.py``): it progresses faster with more workers, stands still for a restart delay
at each resize, and when it is done its bound workers finish together and its pending ones are
withdrawn.

The twin owns a ``gpuaware.gpu.SimulatedFleet`` with the same nodes and GPU uuids, whose pods mirror
the bindings (compute share, and the slice's memory as the framebuffer the pod holds; a slice without
memory gets the fleet's seeded share): the telemetry agent samples the twin's GPUs and sees exactly
the load the twin placed - in the binder's process, or in another one through the dcgm-exporter text
the binder serves.

Nodes can be switched off when idle and on again (``power_off`` / ``power_on``, ``power.py``): an off
or booting node takes no pod until its boot delay has passed.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from gpuaware.gpu import FleetNode, FleetSpec, PodLoad, SimulatedFleet, Topology
from gpuaware.placement import MILLI, NodeSpec
from gpuaware.schemas import gpu_model, simulated_as
from gpuaware.sim.twin.cluster import gpu_memory_mib
from gpuaware.sim.twin.elastic import RESIZE_RESTART_DELAY_S, ElasticJob, JobRate, job_key, linear_rate
from gpuaware.sim.twin.power import DEFAULT_BOOT_DELAY_S, NodePower
from gpuaware.sim.workload_gen import SimPod

__all__ = [
    "Arrived",
    "Binding",
    "CheckpointAnswered",
    "Eviction",
    "Finished",
    "PodState",
    "Refusal",
    "Refused",
    "Slice",
    "Twin",
    "TwinEvent",
    "TwinGpu",
    "Withdrawn",
]


class Refusal(StrEnum):
    """Why the world refused a bind or an eviction. ``transient`` says whether deciding again can help."""

    UNKNOWN_POD = "unknown_pod"
    """no such pod (never submitted, or not arrived yet)"""
    POD_FINISHED = "pod_finished"
    ALREADY_BOUND = "already_bound"
    NOT_BOUND = "not_bound"
    """eviction of a pod that holds nothing"""
    UNKNOWN_NODE = "unknown_node"
    UNKNOWN_GPU = "unknown_gpu"
    GPU_NOT_ON_NODE = "gpu_not_on_node"
    """a slice names a GPU of another node, or the wrong index for its uuid"""
    WRONG_GPU_COUNT = "wrong_gpu_count"
    SLICE_TOO_SMALL = "slice_too_small"
    GPU_OVER_ALLOCATED = "gpu_over_allocated"
    GPU_MEMORY_OVER_ALLOCATED = "gpu_memory_over_allocated"
    CPU_OVER_ALLOCATED = "cpu_over_allocated"
    MEMORY_OVER_ALLOCATED = "memory_over_allocated"
    NODE_POWERED_OFF = "node_powered_off"
    """the node is switched off or still booting (``power.NodePower``)"""
    NODE_BUSY = "node_busy"
    """a node with pods bound cannot be switched off"""

    @property
    def transient(self) -> bool:
        """True: the pod still wants a place; a fresh decision may succeed. False: the pod's own
        state forbids it (gone, unknown, already placed), re-deciding cannot help."""
        return self not in (Refusal.UNKNOWN_POD, Refusal.POD_FINISHED, Refusal.ALREADY_BOUND, Refusal.NOT_BOUND)


class Refused(Exception):
    """The world refuses: ``reason`` is a ``Refusal`` code, the message says what was wrong."""

    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(f"{reason.value}: {message}")
        self.reason = reason
        self.message = message

    @property
    def transient(self) -> bool:
        return self.reason.transient


@dataclass(frozen=True, slots=True)
class Slice:
    """Part of one GPU given to a pod (the attribute names of ``gpuaware.schemas.GpuSlice``)."""

    gpu_uuid: str
    gpu_milli: int
    memory_mib: int = 0
    gpu_index: int | None = None
    """when given, must match the uuid's index"""


@dataclass(frozen=True, slots=True)
class TwinGpu:
    """One GPU of the twin: identity (the fleet's uuid), model, memory and topology."""

    uuid: str
    node: str
    index: int
    model: str
    memory_mib: int
    """0 = undisclosed model: memory is not accounted"""
    nvlink_island: str | None
    numa_node: int | None


@dataclass(frozen=True, slots=True)
class Binding:
    """A pod bound to a node and GPU slices: the truth."""

    pod: SimPod
    node: str
    slices: tuple[Slice, ...]
    bound_at: float
    decision_id: str | None
    attempt: int


PodState = Literal["future", "pending", "bound", "finished"]


@dataclass(slots=True)
class _Pod:
    pod: SimPod
    state: PodState = "future"
    attempt: int = 0
    remaining_s: float | None = None
    binding: Binding | None = None
    epoch: int = 0
    """bumped on every bind/evict: a departure scheduled for an older epoch is stale"""
    first_started_at: float | None = None
    lost_work_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Arrived:
    """A pod of the workload arrived and is pending."""

    at: float
    pod: SimPod


@dataclass(frozen=True, slots=True)
class Finished:
    """A bound pod completed its work and released its slices."""

    at: float
    binding: Binding
    started_at: float
    """when it was first bound (before any preemption)"""


@dataclass(frozen=True, slots=True)
class CheckpointAnswered:
    """A pod's answer to a checkpoint request: ``completed`` (state saved), ``unsupported``
    (not checkpointable) or ``failed`` (it is no longer running)."""

    at: float
    request_id: str
    pod: SimPod
    status: Literal["completed", "unsupported", "failed"]
    answer: int
    """1 for the first answer to this request id, 2 when asked again, ..."""
    checkpoint_uri: str | None = None


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """A pending worker of an elastic job that finished without it: its controller deletes it."""

    at: float
    pod: SimPod
    started_at: float | None
    """when it was first bound, if it ever ran"""


TwinEvent = Arrived | Finished | CheckpointAnswered | Withdrawn


@dataclass(frozen=True, slots=True)
class Eviction:
    """What an eviction released, and what becomes of the pod."""

    binding: Binding
    at: float
    checkpointed: bool
    lost_work_s: float
    """work thrown away (0 when checkpointed)"""
    attempt: int
    """the pod's attempt counter after it went back to pending"""


@dataclass(order=True, slots=True)
class _Due:
    at: float
    seq: int
    kind: str = field(compare=False)
    key: str = field(compare=False)
    epoch: int = field(compare=False, default=0)


class Twin:
    """A simulated GPU cluster and its workload (see the module docstring)."""

    def __init__(self, nodes: Sequence[NodeSpec], workload: Iterable[SimPod] = (), *, start: float = 0.0,
                 seed: int = 0, cluster: str = "default", checkpoint_delay_s: tuple[float, float] = (2.0, 20.0),
                 fleet: bool = True, traces: Literal["auto", "synthetic"] = "synthetic",
                 job_rate: JobRate = linear_rate, restart_delay_s: float = RESIZE_RESTART_DELAY_S,
                 boot_delay_s: float = DEFAULT_BOOT_DELAY_S) -> None:
        if not nodes:
            raise ValueError("a twin needs at least one node")
        lo, hi = checkpoint_delay_s
        if not 0 <= lo <= hi:
            raise ValueError(f"checkpoint_delay_s {checkpoint_delay_s}: need 0 <= low <= high")
        self.start = float(start)
        self.now = float(start)
        self.seed = seed
        self.cluster = cluster
        self.checkpoint_delay_s = (float(lo), float(hi))
        if restart_delay_s < 0:
            raise ValueError(f"restart_delay_s {restart_delay_s}: need >= 0")
        self.job_rate = job_rate
        """an elastic job's pace with n workers (``elastic.JobRate``)"""
        self.restart_delay_s = float(restart_delay_s)
        """what each resize of an elastic job costs it (``elastic.RESIZE_RESTART_DELAY_S``)"""
        self.generation = 0
        """bumped on every change of the truth (bind, evict, departure)"""
        self.nodes: dict[str, NodeSpec] = {}
        for n in nodes:
            if n.name in self.nodes:
                raise ValueError(f"duplicate node {n.name!r}")
            self.nodes[n.name] = n
        self.fleet_spec = FleetSpec(  # GPU uuids are uuid5(seed, node, index): another process rebuilds them
            nodes=tuple(_fleet_node(n) for n in nodes), seed=seed, occupancy=0.0, traces=traces, cluster=cluster)
        self.fleet: SimulatedFleet | None = SimulatedFleet(self.fleet_spec, clock=self.clock) if fleet else None
        self.gpus: dict[str, TwinGpu] = {}
        self.node_gpus: dict[str, tuple[TwinGpu, ...]] = {}
        self._build_gpus()
        self._gpu_milli: dict[str, int] = dict.fromkeys(self.gpus, 0)
        self._gpu_mem: dict[str, int] = dict.fromkeys(self.gpus, 0)
        self._cpu: dict[str, int] = dict.fromkeys(self.nodes, 0)
        self._mem: dict[str, int] = dict.fromkeys(self.nodes, 0)
        self._pods: dict[str, _Pod] = {}
        self._counts: dict[str, int] = {"future": 0, "pending": 0, "bound": 0, "finished": 0}
        self._arrivals: list[SimPod] = []
        self._next_arrival = 0
        self._due: list[_Due] = []
        self._seq = 0
        self._checkpoints: dict[str, int] = {}
        """request id -> answers scheduled so far"""
        self._in_flight: set[str] = set()
        self._jobs: dict[str, ElasticJob] = {}
        self._job_of: dict[str, ElasticJob] = {}
        self.power = NodePower(self.nodes, self.clock, boot_delay_s)
        """each node's power state: ``power_off`` / ``power_on`` act on it, ``bind`` respects it"""
        self.submit(workload)

    # --- construction -------------------------------------------------------------------------------

    def clock(self) -> float:
        """The twin's current virtual time (what the fleet reads)."""
        return self.now

    def _build_gpus(self) -> None:
        fleet = self.fleet if self.fleet is not None else SimulatedFleet(self.fleet_spec, clock=self.clock)
        for name, spec in self.nodes.items():
            inv = fleet.inventory(name)
            gpus = tuple(
                TwinGpu(uuid=g.uuid, node=name, index=g.index, model=spec.gpu_model,
                        memory_mib=gpu_memory_mib(spec.gpu_model), nvlink_island=g.nvlink_island,
                        numa_node=g.numa_node)
                for g in inv.gpus
            )
            self.node_gpus[name] = gpus
            for g in gpus:
                self.gpus[g.uuid] = g

    def submit(self, pods: Iterable[SimPod]) -> None:
        """Add pods to the workload; each arrives ``arrival_s`` after ``start`` (or now, if that passed)."""
        new = list(pods)
        for p in new:
            if p.uid in self._pods:
                raise ValueError(f"pod uid {p.uid!r} submitted twice")
            self._pods[p.uid] = _Pod(p, remaining_s=None if p.elastic else p.duration_s)
            self._counts["future"] += 1
            if p.elastic:
                self._join_job(p)
        if new:
            rest = self._arrivals[self._next_arrival:] + new
            rest.sort(key=lambda p: (p.arrival_s, p.uid))
            self._arrivals, self._next_arrival = rest, 0

    def _join_job(self, p: SimPod) -> None:
        """Count ``p`` among its elastic job's workers; the job's work is its workers' longest duration."""
        key = job_key(p)
        job = self._jobs.get(key)
        if job is None:
            job = self._jobs[key] = ElasticJob(key, p, self.job_rate, p.duration_s, since=self.now)
        elif job.work_s is not None and not job.done_s:
            job.work_s = None if p.duration_s is None else max(job.work_s, p.duration_s)
        job.members.append(p.uid)
        self._job_of[p.uid] = job

    # --- time ---------------------------------------------------------------------------------------

    def _push(self, at: float, kind: str, key: str, epoch: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._due, _Due(at, self._seq, kind, key, epoch))

    def _arrival_at(self) -> float | None:
        if self._next_arrival < len(self._arrivals):
            return max(self.start + self._arrivals[self._next_arrival].arrival_s, self.now)
        return None

    def next_event_at(self) -> float | None:
        """When the next event is due (None: nothing will ever happen unless someone acts)."""
        while self._due and self._stale(self._due[0]):
            heapq.heappop(self._due)
        due = self._due[0].at if self._due else None
        arrival = self._arrival_at()
        if due is None or (arrival is not None and arrival < due):
            return arrival
        return due

    def _stale(self, d: _Due) -> bool:
        if d.kind == "finish":
            rec = self._pods[d.key]
            return rec.state != "bound" or rec.epoch != d.epoch
        if d.kind == "job":
            job = self._jobs[d.key]
            return job.finished or job.epoch != d.epoch
        return False

    def advance(self, until: float) -> list[TwinEvent]:
        """Process every event due at or before ``until`` in order; the clock ends at ``until``."""
        if until < self.now:
            raise ValueError(f"time does not go backwards: {until} < {self.now}")
        out: list[TwinEvent] = []
        while True:
            at = self.next_event_at()
            if at is None or at > until:
                break
            arrival = self._arrival_at()
            if arrival is not None and arrival <= at and (not self._due or arrival <= self._due[0].at):
                pod = self._arrivals[self._next_arrival]
                self._next_arrival += 1
                self.now = max(self.now, arrival)
                rec = self._pods[pod.uid]
                if rec.state == "future":
                    self._move(rec, "pending")
                    out.append(Arrived(self.now, pod))
                continue
            d = heapq.heappop(self._due)
            self.now = max(self.now, d.at)
            out.extend(self._fire(d))
        self.now = until
        return out

    def _fire(self, d: _Due) -> list[TwinEvent]:
        if d.kind == "finish":
            return [self._finish(self._pods[d.key])]
        if d.kind == "job":
            return self._finish_job(self._jobs[d.key])
        if d.kind == "checkpoint":
            request_id, uid = d.key.split("\0", 1)
            self._in_flight.discard(request_id)
            rec = self._pods[uid]
            answer = self._checkpoints[request_id]
            if rec.state != "bound":
                return [CheckpointAnswered(self.now, request_id, rec.pod, "failed", answer)]
            if not rec.pod.checkpointable:
                return [CheckpointAnswered(self.now, request_id, rec.pod, "unsupported", answer)]
            job = self._job_of.get(uid)
            if job is not None:
                job.checkpointed(self.now)
            uri = f"twin://{self.cluster}/checkpoints/{rec.pod.namespace}/{rec.pod.name}/{request_id}"
            return [CheckpointAnswered(self.now, request_id, rec.pod, "completed", answer, uri)]
        raise AssertionError(f"unknown event kind {d.kind}")

    def _finish(self, rec: _Pod) -> Finished:
        binding = rec.binding
        assert binding is not None
        self._release(rec)
        self._move(rec, "finished")
        rec.remaining_s = 0.0
        started = rec.first_started_at if rec.first_started_at is not None else binding.bound_at
        return Finished(self.now, binding, started)

    def _finish_job(self, job: ElasticJob) -> list[TwinEvent]:
        """The job's work is done: its bound workers finish, its pending ones are withdrawn, the ones
        that have not arrived never will."""
        job.finish(self.now)
        out: list[TwinEvent] = []
        for uid in job.members:
            rec = self._pods[uid]
            if rec.state == "bound":
                out.append(self._finish(rec))
            elif rec.state == "pending":
                self._move(rec, "finished")
                out.append(Withdrawn(self.now, rec.pod, rec.first_started_at))
            elif rec.state == "future":
                self._move(rec, "finished")
        return out

    def _schedule_job(self, job: ElasticJob) -> None:
        at = job.ends_at(self.now)
        if at is not None:
            self._push(at, "job", job.key, job.epoch)

    # --- the truth ----------------------------------------------------------------------------------

    def state(self, uid: str) -> PodState | None:
        """The pod's state; None when no such pod was ever submitted."""
        rec = self._pods.get(uid)
        return None if rec is None else rec.state

    def pod(self, uid: str) -> SimPod | None:
        rec = self._pods.get(uid)
        return None if rec is None else rec.pod

    def attempt(self, uid: str) -> int:
        return self._pods[uid].attempt

    def binding(self, uid: str) -> Binding | None:
        rec = self._pods.get(uid)
        return None if rec is None else rec.binding

    def bindings(self) -> list[Binding]:
        """Every bound pod, in the order they were submitted."""
        return [r.binding for r in self._pods.values() if r.binding is not None]

    def pods(self) -> list[SimPod]:
        """Every pod of the workload, whatever its state, in the order submitted."""
        return [r.pod for r in self._pods.values()]

    def pending(self) -> list[SimPod]:
        return [r.pod for r in self._pods.values() if r.state == "pending"]

    def elastic_job(self, uid: str) -> ElasticJob | None:
        """The elastic job a pod is a worker of (None: not elastic). Read it; the twin changes it."""
        return self._job_of.get(uid)

    def elastic_jobs(self) -> list[ElasticJob]:
        """Every elastic job of the workload, in the order its first worker was submitted."""
        return list(self._jobs.values())

    def counts(self) -> dict[str, int]:
        """Pods per state (kept as states change: cheap enough to ask at every tick)."""
        return dict(self._counts)

    def _move(self, rec: _Pod, state: PodState) -> None:
        self._counts[rec.state] -= 1
        self._counts[state] += 1
        rec.state = state

    def gpu_used(self, uuid: str) -> tuple[int, int]:
        """(milli, memory MiB) allocated on one GPU."""
        return self._gpu_milli[uuid], self._gpu_mem[uuid]

    def node_used(self, node: str) -> tuple[int, int]:
        """(CPU milli, memory MiB) allocated on one node."""
        return self._cpu[node], self._mem[node]

    @property
    def total_gpu_milli(self) -> int:
        return MILLI * len(self.gpus)

    @property
    def used_gpu_milli(self) -> int:
        return sum(self._gpu_milli.values())

    @property
    def checkpoints_in_flight(self) -> int:
        return len(self._in_flight)

    # --- acting on it -------------------------------------------------------------------------------

    def _check_bind(self, rec: _Pod | None, uid: str, node: str, slices: Sequence[Slice]) -> None:
        if rec is None or rec.state == "future":
            raise Refused(Refusal.UNKNOWN_POD, f"no pod {uid!r} has arrived in this world")
        if rec.state == "finished":
            raise Refused(Refusal.POD_FINISHED, f"pod {uid} has finished")
        if rec.state == "bound":
            b = rec.binding
            assert b is not None
            raise Refused(Refusal.ALREADY_BOUND,
                          f"pod {uid} is bound to {b.node} (decision {b.decision_id}) since {b.bound_at:.3f}")
        spec = self.nodes.get(node)
        if spec is None:
            raise Refused(Refusal.UNKNOWN_NODE, f"no node {node!r}")
        if not self.power.takes_pods(node):
            raise Refused(Refusal.NODE_POWERED_OFF, f"{node} is {self.power.state(node)}")
        pod = rec.pod
        if len(slices) != pod.num_gpu:
            raise Refused(Refusal.WRONG_GPU_COUNT, f"pod {uid} needs {pod.num_gpu} GPU(s), got {len(slices)} slice(s)")
        seen: set[str] = set()
        for s in slices:
            gpu = self.gpus.get(s.gpu_uuid)
            if gpu is None:
                raise Refused(Refusal.UNKNOWN_GPU, f"no GPU {s.gpu_uuid}")
            if gpu.node != node or (s.gpu_index is not None and s.gpu_index != gpu.index) or s.gpu_uuid in seen:
                raise Refused(Refusal.GPU_NOT_ON_NODE,
                              f"slice {s.gpu_uuid} (index {s.gpu_index}) is GPU {gpu.index} of {gpu.node}, "
                              f"not a distinct GPU of {node}")
            seen.add(s.gpu_uuid)
            if s.gpu_milli < pod.gpu_milli or (pod.gpu_memory_mib and s.memory_mib < pod.gpu_memory_mib):
                raise Refused(Refusal.SLICE_TOO_SMALL,
                              f"pod {uid} asks {pod.gpu_milli} milli / {pod.gpu_memory_mib} MiB per GPU, slice on "
                              f"{s.gpu_uuid} gives {s.gpu_milli} / {s.memory_mib}")
            used = self._gpu_milli[s.gpu_uuid]
            if used + s.gpu_milli > MILLI:
                raise Refused(Refusal.GPU_OVER_ALLOCATED,
                              f"GPU {gpu.index} of {node} has {MILLI - used} milli free, slice asks {s.gpu_milli}")
            mem = self._gpu_mem[s.gpu_uuid]
            if gpu.memory_mib and mem + s.memory_mib > gpu.memory_mib:
                raise Refused(Refusal.GPU_MEMORY_OVER_ALLOCATED,
                              f"GPU {gpu.index} of {node} has {gpu.memory_mib - mem} MiB free, "
                              f"slice asks {s.memory_mib}")
        if self._cpu[node] + pod.cpu_milli > spec.cpu_milli:
            raise Refused(Refusal.CPU_OVER_ALLOCATED,
                          f"{node} has {spec.cpu_milli - self._cpu[node]} CPU milli free, pod asks {pod.cpu_milli}")
        if self._mem[node] + pod.memory_mib > spec.memory_mib:
            raise Refused(Refusal.MEMORY_OVER_ALLOCATED,
                          f"{node} has {spec.memory_mib - self._mem[node]} MiB free, pod asks {pod.memory_mib}")

    def bind(self, uid: str, node: str, slices: Sequence[Slice], *, decision_id: str | None = None) -> Binding:
        """Bind a pending pod to ``node`` and exactly ``slices``; raises ``Refused`` and changes nothing
        when the world cannot do it."""
        rec = self._pods.get(uid)
        slices = tuple(slices)
        self._check_bind(rec, uid, node, slices)
        assert rec is not None
        pod = rec.pod
        for s in slices:
            self._gpu_milli[s.gpu_uuid] += s.gpu_milli
            self._gpu_mem[s.gpu_uuid] += s.memory_mib
        self._cpu[node] += pod.cpu_milli
        self._mem[node] += pod.memory_mib
        full = tuple(Slice(s.gpu_uuid, s.gpu_milli, s.memory_mib, self.gpus[s.gpu_uuid].index) for s in slices)
        binding = Binding(pod, node, full, self.now, decision_id, rec.attempt)
        rec.binding = binding
        self._move(rec, "bound")
        rec.epoch += 1
        if rec.first_started_at is None:
            rec.first_started_at = self.now
        if rec.remaining_s is not None:
            self._push(self.now + rec.remaining_s, "finish", uid, rec.epoch)
        job = self._job_of.get(uid)
        if job is not None:
            job.join(uid, node, self.now, checkpointable=pod.checkpointable, delay=self.restart_delay_s)
            self._schedule_job(job)
        if self.fleet is not None:
            for s in full:
                self.fleet.assign(s.gpu_uuid, PodLoad(name=pod.name, namespace=pod.namespace,
                                                      milli=max(1, min(MILLI, s.gpu_milli)),
                                                      memory_mib=s.memory_mib or None))
        self.generation += 1
        return binding

    def _release(self, rec: _Pod) -> Binding:
        b = rec.binding
        assert b is not None
        for s in b.slices:
            self._gpu_milli[s.gpu_uuid] -= s.gpu_milli
            self._gpu_mem[s.gpu_uuid] -= s.memory_mib
        self._cpu[b.node] -= b.pod.cpu_milli
        self._mem[b.node] -= b.pod.memory_mib
        if self.fleet is not None and b.slices:
            self.fleet.release(b.pod.name, b.pod.namespace)
        rec.binding = None
        rec.epoch += 1
        self.generation += 1
        return b

    def evict(self, uid: str, *, checkpointed: bool = False) -> Eviction:
        """Evict a bound pod; it goes back to pending with its progress if it ``checkpointed``,
        from scratch otherwise. Raises ``Refused`` (``not_bound``, ``unknown_pod``)."""
        rec = self._pods.get(uid)
        if rec is None or rec.state == "future":
            raise Refused(Refusal.UNKNOWN_POD, f"no pod {uid!r} has arrived in this world")
        if rec.state != "bound":
            raise Refused(Refusal.NOT_BOUND, f"pod {uid} is {rec.state}, not bound")
        binding = self._release(rec)
        ran = self.now - binding.bound_at
        lost = 0.0
        checkpointed = checkpointed and rec.pod.checkpointable
        if rec.remaining_s is not None:
            if checkpointed:
                rec.remaining_s = max(0.0, rec.remaining_s - ran)
            else:
                lost = (rec.pod.duration_s or 0.0) - rec.remaining_s + ran
                rec.remaining_s = rec.pod.duration_s
        job = self._job_of.get(uid)
        if job is not None:
            before = job.lost_s
            job.leave(uid, self.now, checkpointed=checkpointed, delay=self.restart_delay_s)
            lost = job.lost_s - before
            self._schedule_job(job)
        rec.lost_work_s += lost
        self._move(rec, "pending")
        rec.attempt += 1
        return Eviction(binding, self.now, checkpointed, lost, rec.attempt)

    def requeue(self, uid: str) -> int:
        """Count another attempt of a pending pod (a bind failed and it waits again); returns it."""
        rec = self._pods.get(uid)
        if rec is None or rec.state != "pending":
            reason = {None: Refusal.UNKNOWN_POD, "future": Refusal.UNKNOWN_POD, "bound": Refusal.ALREADY_BOUND,
                      "finished": Refusal.POD_FINISHED}[rec.state if rec else None]
            raise Refused(reason, f"pod {uid} is {rec.state if rec else 'unknown'}, not pending")
        rec.attempt += 1
        return rec.attempt

    def request_checkpoint(self, uid: str, request_id: str) -> float:
        """Ask a bound pod to checkpoint; it answers (a ``CheckpointAnswered`` event) after a delay
        drawn from ``checkpoint_delay_s`` by a hash of (seed, request id). Asking again while the
        first answer is pending changes nothing. Returns when the answer is due."""
        rec = self._pods.get(uid)
        if rec is None or rec.state == "future":
            raise Refused(Refusal.UNKNOWN_POD, f"no pod {uid!r} has arrived in this world")
        key = f"{request_id}\0{uid}"
        if request_id in self._in_flight:
            return next(d.at for d in self._due if d.kind == "checkpoint" and d.key == key)
        lo, hi = self.checkpoint_delay_s
        digest = hashlib.blake2b(f"{self.seed}/{request_id}".encode(), digest_size=8).digest()
        frac = int.from_bytes(digest, "big") / 2**64
        delay = lo + (hi - lo) * frac if rec.pod.checkpointable else min(lo, 1.0)
        self._checkpoints[request_id] = self._checkpoints.get(request_id, 0) + 1
        self._in_flight.add(request_id)
        self._push(self.now + delay, "checkpoint", key)
        return self.now + delay

    def power_off(self, node: str) -> None:
        """Switch an idle node off (a planner's ``power-down``); raises ``Refused`` for an unknown node or
        one with pods bound."""
        if node not in self.nodes:
            raise Refused(Refusal.UNKNOWN_NODE, f"no node {node!r}")
        if self._cpu[node] or self._mem[node] or any(self._gpu_milli[g.uuid] for g in self.node_gpus[node]):
            raise Refused(Refusal.NODE_BUSY, f"{node} has pods bound")
        self.power.off(node)
        self.generation += 1

    def power_on(self, node: str) -> float:
        """Start a node's boot (a planner's ``power-up``); returns when it takes pods."""
        if node not in self.nodes:
            raise Refused(Refusal.UNKNOWN_NODE, f"no node {node!r}")
        ready = self.power.on(node)
        self.generation += 1
        return ready

    def check(self) -> None:
        """Re-derive every allocation from the bindings and compare; raises AssertionError on drift
        or over-allocation (tests, and the demo's invariant check)."""
        milli = dict.fromkeys(self.gpus, 0)
        mem = dict.fromkeys(self.gpus, 0)
        cpu = dict.fromkeys(self.nodes, 0)
        ram = dict.fromkeys(self.nodes, 0)
        for b in self.bindings():
            for s in b.slices:
                milli[s.gpu_uuid] += s.gpu_milli
                mem[s.gpu_uuid] += s.memory_mib
            cpu[b.node] += b.pod.cpu_milli
            ram[b.node] += b.pod.memory_mib
        assert milli == self._gpu_milli and mem == self._gpu_mem, "GPU ledger drifted from the bindings"
        assert cpu == self._cpu and ram == self._mem, "node ledger drifted from the bindings"
        states = {"future": 0, "pending": 0, "bound": 0, "finished": 0}
        for r in self._pods.values():
            states[r.state] += 1
        assert states == self._counts, f"state counts drifted: {self._counts} != {states}"
        for uuid, used in milli.items():
            gpu = self.gpus[uuid]
            assert used <= MILLI, f"GPU {uuid} over-allocated: {used} milli"
            assert not gpu.memory_mib or mem[uuid] <= gpu.memory_mib, f"GPU {uuid} memory over-allocated"
        for name, spec in self.nodes.items():
            assert cpu[name] <= spec.cpu_milli and ram[name] <= spec.memory_mib, f"node {name} over-allocated"


def _fleet_node(n: NodeSpec) -> FleetNode:
    """The simulated-GPU node behind a twin node: the same catalog model (its stand-in for an
    undisclosed one), and its real topology so the agent's inventory names the same NVLink islands
    and NUMA nodes the twin does. A model the catalog does not know raises ValueError."""
    links = max(1, simulated_as(gpu_model(n.gpu_model)).nvlink_links) if n.num_gpu else 1
    islands = n.nvlink_islands or (-1,) * n.num_gpu
    numa = n.numa_nodes or (0,) * n.num_gpu
    rows = []
    for i in range(n.num_gpu):
        row = []
        for j in range(n.num_gpu):
            if i == j:
                row.append("X")
            elif islands[i] >= 0 and islands[i] == islands[j]:
                row.append(f"NV{links}")
            else:
                row.append("NODE" if numa[i] == numa[j] else "SYS")
        rows.append(tuple(row))
    topology = Topology(gpus=tuple(f"GPU{i}" for i in range(n.num_gpu)), links=tuple(rows),
                        numa_affinity=tuple(str(x) for x in numa)) if n.num_gpu else None
    return FleetNode(name=n.name, model=n.gpu_model or "A100", gpus=n.num_gpu, topology=topology,
                     rack=n.rack or None, zone=n.zone or None, labels=dict(n.labels))
