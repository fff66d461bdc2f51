"""The errors of the GPU layer, each saying what the caller does next.

* ``GpuBackendUnavailable`` is permanent for this process: the backend cannot work here (no NVIDIA
  driver, dcgm-exporter not reachable at construction). The agent picks another backend or exits
  with the message; retrying the same call will not help.
* ``GpuBackendError`` is transient: one call failed (a scrape timed out, NVML answered "Unknown
  Error"). The agent keeps its last good state and retries on the next tick.
* ``TopologyParseError`` and ``TraceError`` are permanent input errors that name the offending
  line, because a silently skipped row would quietly change the topology or the replayed load.
"""

from __future__ import annotations

__all__ = ["GpuBackendError", "GpuBackendUnavailable", "TopologyParseError", "TraceError"]


class GpuBackendUnavailable(RuntimeError):
    """This backend cannot run on this machine; choose another one (permanent)."""


class GpuBackendError(RuntimeError):
    """One backend call failed; retry on the next tick (transient)."""


class TopologyParseError(ValueError):
    """A ``nvidia-smi topo -m`` text cannot be understood; the message names the line."""

    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(f"line {line}: {message}" if line is not None else message)
        self.line = line


class TraceError(ValueError):
    """A utilisation trace cannot be used as given; the message names the file."""
