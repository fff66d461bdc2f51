"""The binder carries out node-power recommendations on the twin and answers each once: an idle node is
switched off, a busy one is refused (the answer says ``on`` and why), a node switched on boots for the
twin's boot delay, a redelivered recommendation changes nothing, a failed publish leaves the answer owed,
and a restarted binder's twin has its nodes switched as the stream says. Kubernetes: the node is cordoned
and annotated, uncordoned on power-up only if gpuaware cordoned it, and nothing is patched with node power
switched off."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest
from binder_helpers import T0, decision, sim_pod, twin_world
from kubernetes.client.exceptions import ApiException
from test_binder_publish_failure import FlakyStream, NatsDown

from gpuaware.k8s import POWER
from gpuaware.schemas import NodePowerChanged, NodePowerRecommended
from gpuaware.services.binder.binder import Binder
from gpuaware.services.binder.kube_world import KubeWorld
from gpuaware.sim import Refused, Slice
from gpuaware.sim.twin import Refusal


def rec(rid: str, node: str, action: Literal["power-down", "power-up"] = "power-down") -> NodePowerRecommended:
    return NodePowerRecommended(source="placement/test", emitted_at=T0, recommendation_id=rid, node=node,
                                action=action, recommended_at=T0, reason="test", powered_target=1, demand_nodes=1)


def answers(stream: FlakyStream) -> list[NodePowerChanged]:
    return [e for e in stream.stored.values() if isinstance(e, NodePowerChanged)]


def test_an_idle_node_goes_off_a_busy_one_is_refused_and_a_boot_takes_the_delay() -> None:
    async def main() -> None:
        world = twin_world(sim_pod("p1"), sim_pod("p2"))
        stream = FlakyStream()
        binder = Binder(world, stream, source="binder/test")
        assert await binder.on_decision(decision(world, "d1", "p1", "n1", [(0, 1000, 0)])) == "bound"
        assert await binder.on_power(rec("r1", "n2")) == "done"
        assert await binder.on_power(rec("r2", "n1")) == "refused"
        assert await binder.on_power(rec("r1", "n2")) == "duplicate"
        off, refused = answers(stream)
        assert (off.node, off.state, off.reason, off.recommendation_id) == ("n2", "off", "", "r1")
        assert (refused.node, refused.state) == ("n1", "on") and refused.reason.startswith("node_busy")
        assert world.twin.power.state("n2") == "off"
        world._sync()
        gpu = world.twin.node_gpus["n2"][0]
        with pytest.raises(Refused) as refused_bind:  # the twin takes no pod there now
            world.twin.bind("p2", "n2", [Slice(gpu.uuid, 1000, 0, 0)])
        assert refused_bind.value.reason == Refusal.NODE_POWERED_OFF
        assert await binder.on_power(rec("r3", "n2", "power-up")) == "done"
        boot = answers(stream)[-1]
        assert boot.state == "booting" and boot.ready_at is not None
        assert boot.ready_at - world.twin.now == pytest.approx(world.twin.power.boot_delay_s)
        assert binder.stats.power_done == 2 and binder.stats.power_refused == 1

    asyncio.run(main())


def test_a_failed_publish_leaves_the_answer_owed_and_the_retry_sends_it_once() -> None:
    async def main() -> None:
        world = twin_world()
        stream = FlakyStream(fail_once={NodePowerChanged})
        binder = Binder(world, stream, source="binder/test")
        with pytest.raises(NatsDown):
            await binder.on_power(rec("r1", "n2"))
        assert world.twin.power.state("n2") == "off" and not answers(stream)
        assert await binder.on_power(rec("r1", "n2")) == "done"  # the redelivery: the world's switch is idempotent
        assert [a.state for a in answers(stream)] == ["off"]

    asyncio.run(main())


def test_a_restored_twin_has_its_nodes_switched_as_published() -> None:
    async def main() -> None:
        world = twin_world()
        stream = FlakyStream()
        binder = Binder(world, stream, source="binder/test")
        await binder.on_power(rec("r1", "n2"))
        fresh = twin_world()
        counts = fresh.restore(list(stream.stored.values()))
        assert counts["powered"] == 1 and fresh.twin.power.state("n2") == "off"
        assert fresh.twin.power.state("n1") == "on"

    asyncio.run(main())


class FakeCore:
    """The node patches the binder sends; a JSON patch whose test names another state fails with 422."""

    def __init__(self, annotations: dict[str, str] | None = None) -> None:
        self.patches: list[tuple[str, Any]] = []
        self.annotations = dict(annotations or {})

    def patch_node(self, name: str, body: Any) -> None:
        if isinstance(body, list):
            test = next(op for op in body if op["op"] == "test")
            if self.annotations.get(POWER.STATE) != test["value"]:
                raise ApiException(status=422, reason="test failed")
        self.patches.append((name, body))


def test_kubernetes_cordons_and_uncordons_only_its_own_and_does_nothing_when_off() -> None:
    async def main() -> None:
        core = FakeCore()
        world = KubeWorld(core, cluster="default", node_power=True, clock=lambda: T0)
        down = await world.power(rec("r1", "gpu-1"))
        assert (down.state, down.reason) == ("off", "")
        name, body = core.patches[-1]
        assert name == "gpu-1" and body["spec"] == {"unschedulable": True}
        assert body["metadata"]["annotations"][POWER.STATE] == "off"
        up = await world.power(rec("r2", "gpu-2", "power-up"))  # never cordoned by gpuaware: left alone
        assert up.state == "on" and len(core.patches) == 1
        core.annotations[POWER.STATE] = "off"
        await world.power(rec("r3", "gpu-1", "power-up"))
        ops = {op["path"]: op.get("value") for op in core.patches[-1][1]}
        assert ops["/spec/unschedulable"] is False and ops["/metadata/annotations/gpuaware.io~1power"] == "on"
        quiet = FakeCore()
        refused = await KubeWorld(quiet, cluster="default", clock=lambda: T0).power(rec("r4", "gpu-1"))
        assert refused.state == "on" and refused.reason.startswith("node_power_off") and not quiet.patches

    asyncio.run(main())
