"""Node power in the twin: an idle node switched off takes no pod, a busy one cannot be switched off,
and a node switched on takes pods only once its boot delay has passed; off time is accounted."""

from __future__ import annotations

import pytest

from gpuaware.placement import NodeSpec
from gpuaware.sim.twin import Refusal, Refused, Slice, Twin
from gpuaware.sim.workload_gen import SimPod

NODES = (NodeSpec("n1", 32_000, 131_072, 1, "A100"), NodeSpec("n2", 32_000, 131_072, 1, "A100"))


def pod(uid: str, at: float = 0.0) -> SimPod:
    return SimPod(uid=uid, name=uid, namespace="t", arrival_s=at, duration_s=None, cpu_milli=1000,
                  memory_mib=1024, num_gpu=1)


def slice_of(twin: Twin, node: str) -> list[Slice]:
    return [Slice(twin.node_gpus[node][0].uuid, 1000, 0)]


def test_a_node_switched_on_takes_pods_only_after_its_boot_delay() -> None:
    twin = Twin(NODES, [pod("a"), pod("b")], start=0.0, fleet=False, boot_delay_s=600.0)
    twin.advance(0.0)
    twin.power_off("n1")
    assert twin.power.state("n1") == "off"
    with pytest.raises(Refused) as off:
        twin.bind("a", "n1", slice_of(twin, "n1"))
    assert off.value.reason == Refusal.NODE_POWERED_OFF and off.value.transient
    twin.advance(3_600.0)
    assert twin.power_on("n1") == 4_200.0
    twin.advance(4_199.0)
    assert twin.power.state("n1") == "booting"
    with pytest.raises(Refused, match="booting"):
        twin.bind("a", "n1", slice_of(twin, "n1"))
    twin.advance(4_200.0)
    assert twin.power.state("n1") == "on"
    twin.bind("a", "n1", slice_of(twin, "n1"))
    assert twin.power.off_seconds("n1") == 3_600.0 and twin.power.off_seconds("n2") == 0.0
    twin.check()


def test_a_busy_node_cannot_be_switched_off_and_the_other_still_serves() -> None:
    twin = Twin(NODES, [pod("a"), pod("b")], start=0.0, fleet=False)
    twin.advance(0.0)
    twin.bind("a", "n1", slice_of(twin, "n1"))
    with pytest.raises(Refused) as busy:
        twin.power_off("n1")
    assert busy.value.reason == Refusal.NODE_BUSY and twin.power.state("n1") == "on"
    with pytest.raises(Refused):
        twin.power_off("nope")
    twin.bind("b", "n2", slice_of(twin, "n2"))  # nothing else changed
    twin.advance(100.0)
    assert twin.power.off_seconds() == 0.0
    assert twin.power_on("n2") == 100.0  # on already: takes pods now


def test_off_time_accrues_while_off_and_stops_at_power_on() -> None:
    twin = Twin(NODES, [], start=1_000.0, fleet=False, boot_delay_s=0.0)
    twin.power_off("n2")
    twin.advance(1_500.0)
    assert twin.power.off_seconds() == 500.0
    twin.power_on("n2")
    twin.advance(9_000.0)
    assert twin.power.off_seconds("n2") == 500.0 and twin.power.state("n2") == "on"
