"""What the telemetry says about each GPU, kept across node-set rebuilds and applied to each new cluster.

Health states (a quarantined GPU takes no pod) and signals (health score, temperature, power,
forecast utilisation) arrive per GPU, by node and slot, whether or not the node is in the view yet;
each new `Cluster` gets all of them again.

A GPU's utilisation forecast describes the pods it had when it was made: when its last pod leaves,
the forecast is dropped (nothing runs there, so none of that load is coming), and a forecast issued
before that moment (on the telemetry's clock, which `clock` reads too) is refused when it arrives
late; otherwise a freed GPU would keep its old tenants' forecast until the next one and whole-GPU
pods would be steered away from it. A GPU gaining pods keeps its forecast: it then understates the
load, but still counts some of it, where dropping it would make the GPU look idle.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from gpuaware.placement.cluster import HEALTHY, QUARANTINED, Cluster
from gpuaware.placement.model import MILLI

__all__ = ["GpuTelemetry"]

Slot = tuple[str, int]
"""(node, GPU slot)"""


class GpuTelemetry:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.health: dict[Slot, int] = {}
        self.signals: dict[Slot, dict[str, float]] = {}
        """the latest telemetry signals per GPU (health score, temperature, power, forecast)"""
        self.emptied: dict[Slot, float] = {}
        """when (``clock``) each GPU's last pod left"""

    def apply_all(self, cluster: Cluster) -> None:
        """A new cluster: every GPU's known health and signals again."""
        for (node, slot), state in self.health.items():
            _apply_health(cluster, node, slot, state)
        for (node, slot), values in self.signals.items():
            _apply_signals(cluster, node, slot, values)

    def set_health(self, cluster: Cluster | None, node: str, slot: int, state: int) -> bool:
        """Record a GPU's health; True when it gave capacity back (quarantine lifted)."""
        before = self.health.get((node, slot), HEALTHY)
        self.health[(node, slot)] = state
        _apply_health(cluster, node, slot, state)
        return before == QUARANTINED and state != QUARANTINED

    def set_signals(self, cluster: Cluster | None, node: str, slot: int, values: dict[str, float | None]) -> bool:
        """Record a GPU's signals (``Cluster.set_gpu_signals`` keywords; None: not reported). True when
        the cluster's (quantised) view changed."""
        known = {k: v for k, v in values.items() if v is not None}
        if not known:
            return False
        self.signals.setdefault((node, slot), {}).update(known)
        return _apply_signals(cluster, node, slot, known)

    def is_stale(self, node: str, slot: int, issued_at: float) -> bool:
        """A forecast issued before the GPU's last pod left: of load that is gone."""
        return issued_at < self.emptied.get((node, slot), -math.inf)

    def released(self, cluster: Cluster, node: str, gpus: Iterable[int]) -> None:
        """After a release: the GPUs left without a pod forget their forecast."""
        i = cluster.index.get(node)
        if i is None:
            return
        for g in gpus:
            if 0 <= g < cluster.gpu_count[i] and cluster.gpu_free[i, g] == MILLI:
                self.emptied[(node, g)] = self.clock()
                known = self.signals.get((node, g))
                if known is not None and known.pop("util_forecast", None) is not None:
                    _apply_signals(cluster, node, g, {"util_forecast": math.nan})


def _row(cluster: Cluster | None, node: str, slot: int) -> int | None:
    i = None if cluster is None else cluster.index.get(node)
    if i is None or cluster is None or not 0 <= slot < cluster.gpu_count[i]:
        return None
    return i


def _apply_signals(cluster: Cluster | None, node: str, slot: int, values: dict[str, float]) -> bool:
    i = _row(cluster, node, slot)
    return i is not None and cluster is not None and cluster.set_gpu_signals(i, slot, **values)


def _apply_health(cluster: Cluster | None, node: str, slot: int, state: int) -> None:
    i = _row(cluster, node, slot)
    if i is not None and cluster is not None:
        cluster.set_gpu_health(i, slot, state)
