"""An elastic job's progress in the twin: one job's work shared by its workers, paused by each resize.

An elastic job is a gang whose ``gang_max_members`` exceeds its minimum (torchrun's
``--nnodes=MIN:MAX``): its worker pods share one job's work instead of each running its own
duration. The job's ``work_s`` is its workers' ``duration_s``, read as the time the job needs at
its full width (``gang_max_members`` workers: the width a trace or the generator measured it at);
with ``n`` workers bound it progresses at ``rate(pod, placement)`` of that pace, ``placement`` the
GPUs its workers hold per node - nothing below the minimum (the rendezvous waits for it), ``n / max``
with the default ``linear_rate``, or the throughput a fitted model (``gpuaware.sim.throughput``,
Pollux's) gives for that layout relative to full width, with ``throughput_rate``.

A resize - a worker joining the running job (a *grow*) or leaving it while at least the minimum
keeps running (a *shrink*) - restarts the job at its new world size: the workers checkpoint, form
the new world and load the checkpoint, so the job stands still for ``RESIZE_RESTART_DELAY_S``
and loses no work. Workers joining (or leaving) at one instant are one resize, as one decision's
victims are one shrink for the binder; a resize during another's restart starts the restart over.
Work is lost only where no checkpoint was taken: a shrink or a stop whose eviction did not
checkpoint goes back to the job's last checkpoint (a completed checkpoint answer, a checkpointed
resize), a grow of a job whose workers cannot checkpoint starts it over.

The job finishes when its work is done: every bound worker finishes at that instant, and the
twin withdraws the workers still pending. Pure bookkeeping over the virtual time it is given; the
twin (``world.py``) owns the pods, the slices and the event queue.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuaware.sim.throughput import ThroughputModel, packed_placement
from gpuaware.sim.workload_gen import SimPod

__all__ = ["RESIZE_RESTART_DELAY_S", "ElasticJob", "JobRate", "job_key", "linear_rate", "throughput_rate"]

RESIZE_RESTART_DELAY_S = 30.0
"""seconds an elastic job stands still after each resize: its workers stop, torchrun's rendezvous
forms the new world and every worker loads the checkpoint taken just before the resize"""

JobRate = Callable[[SimPod, tuple[int, ...]], float]
"""how fast an elastic job progresses on a placement - the GPUs its bound workers hold per node,
largest first, a worker without GPUs counted as one - in seconds of its ``duration_s`` (its time
at full width) per second: about 1.0 at ``gang_max_members`` workers. Called with one of its
workers, while at least its minimum is bound."""


def _gpus_per_worker(pod: SimPod) -> int:
    return max(1, pod.num_gpu)


def _full_width(pod: SimPod) -> int:
    return max(1, pod.gang_min_members, pod.gang_max_members)


def linear_rate(pod: SimPod, placement: tuple[int, ...]) -> float:
    """Linear scaling: ``n / max`` of the job's pace at full width, wherever the workers are."""
    workers = sum(placement) // _gpus_per_worker(pod)
    return workers / _full_width(pod)


def throughput_rate(model_of: Callable[[SimPod], tuple[ThroughputModel, int] | None], *,
                    gpus_per_node: int) -> JobRate:
    """A rate from measured throughput: ``model_of(pod)`` gives the job's application model and
    global batch (None: ``linear_rate``); the job's pace is its throughput on the placement over
    its throughput at full width packed onto nodes of ``gpus_per_node`` GPUs (the layout its
    duration is read at). Spreading the same workers over more nodes is slower, as measured."""
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node {gpus_per_node} must be at least 1")

    def rate(pod: SimPod, placement: tuple[int, ...]) -> float:
        found = model_of(pod)
        if found is None:
            return linear_rate(pod, placement)
        model, batch = found
        full = packed_placement(_full_width(pod) * _gpus_per_worker(pod), gpus_per_node)
        return model.throughput(placement, batch) / model.throughput(full, batch)

    return rate


def job_key(pod: SimPod) -> str:
    """The job an elastic worker belongs to: its gang, in its namespace."""
    return f"{pod.namespace}/{pod.gang_id}"


@dataclass(slots=True)
class ElasticJob:
    """One elastic job's progress (see the module docstring). Every change first ``settle``s the
    progress made up to that instant at the old world size."""

    key: str
    pod: SimPod
    """one of its workers: the shape the rate is computed for"""
    rate: JobRate
    work_s: float | None
    """the job's time at full width; None: it never ends"""
    members: list[str] = field(default_factory=list)
    running: dict[str, str] = field(default_factory=dict)
    """workers bound now, and their node"""
    done_s: float = 0.0
    saved_s: float = 0.0
    """progress at the last checkpoint"""
    since: float = 0.0
    paused_until: float = float("-inf")
    finished: bool = False
    epoch: int = 0
    """bumped whenever the job's end moves: an end scheduled for an older epoch is stale"""
    grows: int = 0
    shrinks: int = 0
    last_resize: tuple[float, str] | None = None
    """when the last resize was, and which way: a change at that instant the same way is part of it"""
    restart_s: float = 0.0
    """time spent standing still for resizes"""
    lost_s: float = 0.0
    """progress thrown away by restarts without a checkpoint"""

    @property
    def minimum(self) -> int:
        return max(1, self.pod.gang_min_members)

    @property
    def resizes(self) -> int:
        return self.grows + self.shrinks

    @property
    def workers(self) -> int:
        return len(self.running)

    def runs(self) -> bool:
        """At least its minimum is bound: the job is running (or restarting)."""
        return self.workers >= self.minimum

    def placement(self) -> tuple[int, ...]:
        """GPUs the bound workers hold per node, largest first (a worker without GPUs counts one)."""
        per_node = Counter(self.running.values())
        return tuple(sorted((n * _gpus_per_worker(self.pod) for n in per_node.values()), reverse=True))

    def speed(self) -> float:
        return self.rate(self.pod, self.placement()) if self.runs() else 0.0

    def settle(self, now: float) -> None:
        """Count the progress since the last change (nothing while restarting)."""
        start = max(self.since, self.paused_until)
        if now > start:
            self.done_s += self.speed() * (now - start)
            if self.work_s is not None:
                self.done_s = min(self.done_s, self.work_s)
        self.since = max(self.since, now)

    def ends_at(self, now: float) -> float | None:
        """When the work is done if nothing changes (None: it is not progressing, or never ends)."""
        speed = self.speed()
        if self.finished or self.work_s is None or speed <= 0:
            return None
        return max(now, self.paused_until) + max(0.0, self.work_s - self.done_s) / speed

    def checkpointed(self, now: float) -> None:
        """A worker answered a checkpoint request: the job's progress so far is saved."""
        self.settle(now)
        self.saved_s = self.done_s

    def _restart(self, now: float, *, checkpointed: bool) -> None:
        if checkpointed:
            self.saved_s = self.done_s
        else:
            self.lost_s += self.done_s - self.saved_s
            self.done_s = self.saved_s

    def _pause(self, now: float, delay: float) -> None:
        until = now + delay
        self.restart_s += until - max(now, self.paused_until)
        self.paused_until = until

    def _stop(self, now: float) -> None:
        """Below the minimum: a restart still under way is not charged beyond now."""
        if self.paused_until > now:
            self.restart_s -= self.paused_until - now
            self.paused_until = now

    def _count(self, now: float, way: str) -> int:
        """1 for a new resize, 0 for another worker of the one under way at this instant."""
        same = self.last_resize == (now, way)
        self.last_resize = (now, way)
        return 0 if same else 1

    def join(self, uid: str, node: str, now: float, *, checkpointable: bool, delay: float) -> bool:
        """A worker is bound to ``node``; True when that resized the running job (a grow)."""
        self.settle(now)
        grew = self.runs()
        self.running[uid] = node
        if grew:
            self._restart(now, checkpointed=checkpointable)
            self._pause(now, delay)
            self.grows += self._count(now, "grow")
        self.epoch += 1
        return grew

    def leave(self, uid: str, now: float, *, checkpointed: bool, delay: float) -> bool:
        """A worker is evicted; True when the job keeps running at a smaller size (a shrink)."""
        self.settle(now)
        ran = self.runs()
        self.running.pop(uid, None)
        shrank = ran and self.runs()
        if ran:
            self._restart(now, checkpointed=checkpointed)
            if shrank:
                self._pause(now, delay)
                self.shrinks += self._count(now, "shrink")
            else:
                self._stop(now)
        self.epoch += 1
        return shrank

    def finish(self, now: float) -> None:
        self.settle(now)
        self.finished = True
        self.running.clear()
        self.epoch += 1
