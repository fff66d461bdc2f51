"""The one interface the node agent talks to, whatever is under it: NVML, dcgm-exporter, or the sim.

Four calls and nothing else, so a fourth backend (AMD SMI, a vendor REST API) is one small class:

* ``inventory()`` - what the node has (GPUs, topology, MIG layout) as the ``NodeInventory``
  message itself; the agent announces it at start and whenever it differs from the last one.
* ``sample(now)`` - every GPU of the node at ``now`` as a ``GpuFrame`` (columnar numpy arrays,
  ``frame.to_messages(...)`` gives the ``GpuSampled`` batch). ``now`` is passed in, never read
  from a clock inside, so the agent decides the tick and the simulated backend is deterministic.
* ``events(timeout)`` - XID / ECC / thermal / power events since the last call, waiting at most
  ``timeout`` seconds for the first one. Backends without a push channel never block.
* ``close()`` - release the driver handles; the backend is unusable afterwards.

Errors: ``GpuBackendUnavailable`` (permanent, choose another backend) and ``GpuBackendError``
(transient, retry next tick); see ``errors.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from gpuaware.gpu.events import GpuEvent
from gpuaware.gpu.frame import GpuFrame
from gpuaware.schemas import NodeInventory

__all__ = ["Clock", "GpuBackend", "ManualClock", "system_clock"]

#: a clock is any zero-argument callable returning Unix seconds
Clock = Callable[[], float]


def system_clock() -> float:
    return time.time()


class ManualClock:
    """A clock that moves only when told to: deterministic tests, replays and the demo."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError(f"time does not go backwards (advance by {seconds})")
        self.now += seconds
        return self.now


@runtime_checkable
class GpuBackend(Protocol):
    """Inventory, samples and events of the GPUs of one node."""

    def inventory(self) -> NodeInventory: ...

    def sample(self, now: float) -> GpuFrame: ...

    def events(self, timeout: float = 0.0) -> list[GpuEvent]: ...

    def close(self) -> None: ...
