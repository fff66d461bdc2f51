"""Node power in the twin: an idle node switched off draws nothing and takes a boot delay to come back.

What a node-power planner's recommendations do to a real cluster (a BMC or an autoscaler acting on a
cordoned node), the twin does to its nodes: ``off`` only when no pod is bound there (the twin refuses
otherwise), ``on`` starts a boot that ends ``boot_delay_s`` later. A node that is off or still booting
takes no pod (``Twin.bind`` refuses with ``node_powered_off``, a transient refusal: decide again later).
Readiness is a time, not an event: nothing is published when a boot ends, the node simply takes pods
from then on. Off time is accounted per node (``off_seconds``: node-seconds saved, a boot counted as on,
since a booting node draws power).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = ["DEFAULT_BOOT_DELAY_S", "NodePower", "PowerState"]

DEFAULT_BOOT_DELAY_S = 600.0
"""ten minutes from power-on to a node that takes pods (a GPU server's POST, OS and driver load)"""

PowerState = Literal["on", "off", "booting"]


@dataclass(slots=True)
class _Node:
    off_since: float | None = None
    ready_at: float = float("-inf")
    off_total: float = 0.0


class NodePower:
    """Each node's power state over the twin's clock (see the module docstring)."""

    def __init__(self, nodes: Iterable[str], clock: Callable[[], float],
                 boot_delay_s: float = DEFAULT_BOOT_DELAY_S) -> None:
        if boot_delay_s < 0:
            raise ValueError(f"boot_delay_s {boot_delay_s}: need >= 0")
        self.clock = clock
        self.boot_delay_s = float(boot_delay_s)
        self._nodes = {n: _Node() for n in nodes}

    def state(self, node: str) -> PowerState:
        n = self._nodes[node]
        if n.off_since is not None:
            return "off"
        return "booting" if self.clock() < n.ready_at else "on"

    def takes_pods(self, node: str) -> bool:
        return self.state(node) == "on"

    def off(self, node: str) -> None:
        """Switch ``node`` off now (the caller checked it is idle); a no-op when it is off already."""
        n = self._nodes[node]
        if n.off_since is None:
            n.off_since = self.clock()

    def on(self, node: str) -> float:
        """Start ``node``'s boot now; returns when it takes pods (now, for a node that is on; a boot under
        way keeps its time)."""
        n = self._nodes[node]
        now = self.clock()
        if n.off_since is None:
            return max(now, n.ready_at)
        n.off_total += now - n.off_since
        n.off_since = None
        n.ready_at = now + self.boot_delay_s
        return n.ready_at

    def off_seconds(self, node: str | None = None) -> float:
        """Seconds ``node`` (every node: their sum) has been off so far."""
        now = self.clock()
        nodes = [self._nodes[node]] if node is not None else list(self._nodes.values())
        return sum(n.off_total + (now - n.off_since if n.off_since is not None else 0.0) for n in nodes)

    def states(self) -> dict[str, PowerState]:
        return {name: self.state(name) for name in self._nodes}
