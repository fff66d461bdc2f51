"""Checkpoint client: what a training loop needs to be preempted without losing its work.

When placement preempts a checkpointable pod (priority, a quota reclaim, a drain), the binder first
asks it to save: ``CheckpointRequested`` on NATS (the embedded setup, the digital twin) or the
``gpuaware.io/checkpoint-requested`` / ``-deadline`` annotations on the pod (a cluster). The pod has
until the deadline to answer; then it is evicted anyway. This client turns both into one question a
training loop asks between steps -- ``requested()`` -- and one answer -- ``acknowledge()``:

    async with NatsCheckpoints(nats_url, cluster=..., pod_uid=..., namespace=...) as cp:
        for step in ...:
            train_step()
            if (req := cp.requested()) is not None:
                uri = save(step)                        # before req.deadline_at
                await cp.acknowledge(req, uri=uri)      # the binder evicts now, progress kept
                return
    # in a cluster: AnnotationCheckpoints(path) reads the downward-API annotations file; its
    # acknowledge() writes gpuaware.io/checkpoint-completed through the ``patch`` callable given
    # (e.g. gpuaware.k8s.api.patch_pod_annotations on the pod itself)

Why polling between steps and not a signal handler: a step must finish (or be abandoned) before the
model's state is consistent; the loop knows when that is. ``requested()`` costs a dictionary lookup.
``NatsCheckpoints`` receives on the asyncio loop, so a loop whose steps never await must give it a
turn between steps (``await asyncio.sleep(0)``).

A **resize** (an elastic job shrunk or grown: reason ``resize``, ``world_size`` its worker count once
it resumes) is answered the same way -- save, acknowledge -- and then the worker exits with
``req.exit_code`` (``RESIZE_EXIT_CODE``, not 0): torchrun's elastic agent (``--nnodes MIN:MAX``,
``--max-restarts`` above the resizes expected) restarts a failed worker group, the group
re-rendezvouses with the pods still there, and the workers resume from the checkpoint at the new
world size. A worker of a data-parallel job stops at the same step as its peers (agree on
"any rank was asked" with one collective per step), rank 0 writes, every rank loads; ``Progress``
and ``write_atomically`` (``resume.py``) keep what it saves independent of the world size.
``examples/train_tiny.py`` is a runnable torch loop that survives a preemption or a resize and resumes.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from gpuaware import bus
from gpuaware.checkpoint.resume import Progress, write_atomically
from gpuaware.schemas import (
    CHECKPOINT_ACKNOWLEDGED,
    CHECKPOINT_REQUESTED,
    CheckpointAcknowledged,
    CheckpointRequested,
    CheckpointStatus,
)

__all__ = ["RESIZE_EXIT_CODE", "AnnotationCheckpoints", "CheckpointRequest", "NatsCheckpoints", "Progress",
           "write_atomically"]

REQUESTED = bus.Channel(CHECKPOINT_REQUESTED, CheckpointRequested)
ACKNOWLEDGED = bus.Channel(CHECKPOINT_ACKNOWLEDGED, CheckpointAcknowledged)

RESIZE_EXIT_CODE = 75
"""a worker's exit status after it saved for a resize: non-zero, so torchrun's elastic agent restarts the
worker group at the new world size instead of reporting the job finished (75: sysexits' EX_TEMPFAIL)"""


@dataclass(frozen=True, slots=True)
class CheckpointRequest:
    request_id: str
    pod_uid: str
    namespace: str
    reason: str
    deadline_at: float
    """Unix time after which the pod is evicted whatever it answered"""
    world_size: int | None = None
    """a resize: the job's worker count once it resumes; None for a preemption, drain or migration"""

    @property
    def is_resize(self) -> bool:
        return self.reason == "resize"

    @property
    def exit_code(self) -> int:
        """The worker's exit status once it saved and acknowledged: 0 where the pod goes away (a
        preemption, a drain), ``RESIZE_EXIT_CODE`` for a resize (torchrun restarts it at the new size)."""
        return RESIZE_EXIT_CODE if self.is_resize else 0

    def seconds_left(self, now: float | None = None) -> float:
        return self.deadline_at - (time.time() if now is None else now)


class NatsCheckpoints:
    """Checkpoint requests for one pod over NATS (core subscription to the binder's requests)."""

    def __init__(self, nats_url: str, *, cluster: str, pod_uid: str, namespace: str, source: str = "") -> None:
        self.nats_url = nats_url
        self.cluster = cluster
        self.pod_uid = pod_uid
        self.namespace = namespace
        self.source = source or f"checkpoint-client/{pod_uid}"
        self._pending: CheckpointRequest | None = None
        self._answered: deque[str] = deque(maxlen=64)
        """the request ids this client acknowledged: the binder repeats a request until it hears an
        answer, and a repeat that crosses the answer is not a new request"""
        self._nc: Any = None
        self._subs: list[Any] = []
        self.event = asyncio.Event()
        """set when a request arrives (for loops that await instead of polling)"""

    async def __aenter__(self) -> NatsCheckpoints:
        self._nc = await bus.connect(self.nats_url.split(","), name=self.source)
        decoder = msgspec.json.Decoder(CheckpointRequested)

        async def on(msg: Any) -> None:
            try:
                req = decoder.decode(msg.data)
            except msgspec.DecodeError:
                return  # not ours to judge: the binder dead-letters what it cannot read
            self.offer(req)

        for subject in (CHECKPOINT_REQUESTED, f"{CHECKPOINT_REQUESTED}.>"):
            self._subs.append(await self._nc.subscribe(subject, cb=on))
        await self._nc.flush()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for s in self._subs:
            await s.unsubscribe()
        await bus.close(self._nc)

    def offer(self, req: CheckpointRequested) -> bool:
        """Take a request as the subscription receives it: True when it is this pod's and new (the
        binder repeats a request until answered; a repeat of one already answered is not new)."""
        if req.pod_uid != self.pod_uid or req.cluster != self.cluster or req.request_id in self._answered:
            return False
        self._pending = CheckpointRequest(req.request_id, req.pod_uid, req.namespace, req.reason,
                                          req.requested_at + req.deadline_s, req.world_size)
        self.event.set()
        return True

    def requested(self) -> CheckpointRequest | None:
        """The open request, if one arrived (cheap: call it between steps)."""
        return self._pending

    async def acknowledge(self, req: CheckpointRequest, *, status: CheckpointStatus = CheckpointStatus.COMPLETED,
                          uri: str | None = None, message: str = "") -> None:
        """Answer the binder (stored by JetStream, de-duplicated on the request id); a repeat of the
        request that crosses the answer is ignored."""
        now = time.time()
        ack = CheckpointAcknowledged(source=self.source, emitted_at=now, cluster=self.cluster,
                                     request_id=req.request_id, pod_uid=req.pod_uid, namespace=req.namespace,
                                     status=status, acknowledged_at=now, checkpoint_uri=uri, message=message)
        self._answered.append(req.request_id)
        await bus.publish(self._nc.jetstream(), ACKNOWLEDGED, ack, msg_id=f"ack-{req.request_id}")
        if self._pending is not None and self._pending.request_id == req.request_id:
            self._pending = None
            self.event.clear()


class AnnotationCheckpoints:
    """Checkpoint requests for the pod this runs in, from its downward-API annotations file.

    Mount ``metadata.annotations`` with a downwardAPI volume (the kubelet refreshes the file when the
    binder writes the handshake annotations). ``patch`` merges annotations into the pod (the pod's
    service account needs ``patch`` on its own pod). A ``gpuaware.io/checkpoint-world-size`` annotation
    beside the request makes it a resize to that many workers."""

    def __init__(self, path: str | Path, patch: Callable[[Mapping[str, str]], None], *, pod_uid: str = "",
                 namespace: str = "") -> None:
        self.path = Path(path)
        self.patch = patch
        self.pod_uid = pod_uid
        self.namespace = namespace

    @staticmethod
    def parse(text: str) -> dict[str, str]:
        """The downward API's ``key="value"`` lines (values JSON-quoted) -> a dict."""
        out = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                try:
                    out[key.strip()] = msgspec.json.decode(value.strip())
                except msgspec.DecodeError:
                    out[key.strip()] = value.strip().strip('"')
        return out

    def requested(self) -> CheckpointRequest | None:
        from gpuaware.k8s import ASSIGNED

        try:
            ann = self.parse(self.path.read_text())
        except OSError:
            return None
        at, deadline = ann.get(ASSIGNED.CHECKPOINT_REQUESTED), ann.get(ASSIGNED.CHECKPOINT_DEADLINE)
        if not at or not deadline or ann.get(ASSIGNED.CHECKPOINT_DONE):
            return None
        when = datetime.fromisoformat(deadline.replace("Z", "+00:00")).timestamp()
        world_size = _world_size(ann.get(ASSIGNED.CHECKPOINT_WORLD_SIZE))
        return CheckpointRequest(f"annotation-{at}", self.pod_uid, self.namespace,
                                 "preemption" if world_size is None else "resize", when, world_size)

    async def acknowledge(self, req: CheckpointRequest, *, status: CheckpointStatus = CheckpointStatus.COMPLETED,
                          uri: str | None = None, message: str = "") -> None:
        from gpuaware.k8s import ASSIGNED

        stamp = datetime.fromtimestamp(time.time()).astimezone().isoformat()
        value = stamp if status is CheckpointStatus.COMPLETED else f"{status.value}: {message}"[:250]
        await asyncio.to_thread(self.patch, {ASSIGNED.CHECKPOINT_DONE: value,
                                             **({"gpuaware.io/checkpoint-uri": uri} if uri else {})})


def _world_size(value: Any) -> int | None:
    """The world-size annotation as a worker count; None where absent or not a positive integer (then
    the request is answered as a plain preemption: save and leave, which loses nothing)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        n = int(str(value).strip())
    except ValueError:
        return None
    return n if n >= 1 else None
