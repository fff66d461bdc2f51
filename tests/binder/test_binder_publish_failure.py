"""A publish that fails after the world changed loses nothing: the binder evicts a victim, NATS stops
answering before the eviction is stored, and the decision is retried - the retry no longer sees the
victim bound, so without the owed events the stream would never hear of the eviction or of the
victim's next attempt, and a replay of the stream would keep it on its GPU forever. In process: the
binder's logic over the twin, its outbox a dictionary by message id that fails while told to."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from binder_helpers import T0, decision

from gpuaware.placement import NodeSpec
from gpuaware.schemas import Event, PlannedPreemption, PodBound, PodPending, PodPreempted
from gpuaware.services.binder.binder import Binder
from gpuaware.services.binder.twin_world import TwinWorld
from gpuaware.sim.clock import AcceleratedClock
from gpuaware.sim.twin import Twin
from gpuaware.sim.workload_gen import SimPod

NODES = (NodeSpec("n1", 64_000, 262_144, 1, "A100"),)


class NatsDown(Exception):
    pass


@dataclass
class FlakyStream:
    """Stores each message id once, in order; refuses every publish while ``down`` (after storing
    nothing), and refuses the first publish of a type in ``fail_once``."""

    stored: dict[str, Event] = field(default_factory=dict)
    down: bool = False
    fail_once: set[type] = field(default_factory=set)

    async def publish(self, event: Event, msg_id: str) -> None:
        if self.down:
            raise NatsDown("no responders")
        if type(event) in self.fail_once:
            self.fail_once.discard(type(event))
            raise NatsDown("timed out")
        self.stored.setdefault(msg_id, event)

    def kinds(self, uid: str) -> list[str]:
        return [type(e).__name__ for e in self.stored.values() if getattr(e, "pod_uid", None) == uid]


def pod(uid: str, priority: int) -> SimPod:
    return SimPod(uid=uid, name=uid, namespace="t", arrival_s=0.0, duration_s=None, cpu_milli=1000,
                  memory_mib=1024, num_gpu=1, priority=priority)


def world() -> TwinWorld:
    twin = Twin(NODES, (pod("low", 0), pod("hi", 1000)), start=T0, seed=2, fleet=False)
    return TwinWorld(twin, AcceleratedClock(speed=1.0, start=T0), source="binder/test", skip_idle=False)


VICTIM = PlannedPreemption(pod_uid="low", pod_name="low", namespace="t", node="n1", reason="priority",
                           checkpoint_first=False)


@pytest.mark.parametrize("failing", [PodPreempted, PodPending, PodBound])
async def test_a_retried_decision_announces_the_eviction_its_first_try_could_not(failing: type) -> None:
    w, stream = world(), FlakyStream()
    binder = Binder(w, stream, source="binder/test")
    assert await binder.on_decision(decision(w, "d-low", "low", "n1", [(0, 1000, 0)])) == "bound"
    take_over = decision(w, "d-hi", "hi", "n1", [(0, 1000, 0)], (VICTIM,))

    stream.fail_once = {failing}
    with pytest.raises(NatsDown):
        await binder.on_decision(take_over)
    assert w.twin.state("low") == "pending"  # the world changed; the stream may not know yet

    # the redelivery (bound already when only the bind's own event was refused)
    assert await binder.on_decision(take_over) == ("duplicate" if failing is PodBound else "bound")
    assert stream.kinds("low") == ["PodBound", "PodPreempted", "PodPending"]
    assert [e.attempt for e in stream.stored.values() if isinstance(e, PodPending)] == [1]
    assert stream.kinds("hi") == ["PodBound"]


async def test_what_is_owed_goes_out_first_once_nats_answers_again() -> None:
    w, stream = world(), FlakyStream()
    binder = Binder(w, stream, source="binder/test")
    assert await binder.on_decision(decision(w, "d-low", "low", "n1", [(0, 1000, 0)])) == "bound"
    stream.down = True
    for _ in range(3):  # the decision comes again and again while NATS is away: nothing piles up twice
        with pytest.raises(NatsDown):
            await binder.on_decision(decision(w, "d-hi", "hi", "n1", [(0, 1000, 0)], (VICTIM,)))
    stream.down = False  # the second try bound the pod; its event is owed with the eviction's
    assert await binder.on_decision(decision(w, "d-hi", "hi", "n1", [(0, 1000, 0)], (VICTIM,))) == "duplicate"
    order = [(type(e).__name__, getattr(e, "pod_uid", "")) for e in stream.stored.values()]
    assert order == [("PodBound", "low"), ("PodPreempted", "low"), ("PodPending", "low"), ("PodBound", "hi")]
