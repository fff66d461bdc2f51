"""Per-pod GPU usage: who used how much of each GPU, so shared GPUs are accounted per pod and tenant.

The node agent knows which pods hold which share of each GPU (from the binder's allocation events,
or the digital twin's ledger) and reads the GPU itself every second; it splits each GPU's measured
utilisation and memory among the pods on it and sums the result over a window. One
``PodUsageReported`` per node per window (a minute by default) carries one ``PodGpuUsage`` per
(pod, GPU) that was present during the window.

Units follow the rest of the contract: a share of a GPU is in thousandths (``gpu_milli``); usage
over time is in *GPU-seconds* (one whole GPU busy for one second = 1.0), so summing a tenant's
``gpu_seconds_used`` over its pods and GPUs gives its consumption and ``gpu_seconds_allocated``
what it held, whatever the sharing. ``attribution`` names how the GPU's measurement was split:
``share`` (by allocated share among the pods present; the default when the node cannot measure
per process) or ``process`` (by per-process readings), so readers know how far to trust it.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from gpuaware.schemas.base import Event, Label, Milli, Name, NonNegFloat, Percent, Seconds, Timestamp

__all__ = ["POD_USAGE_REPORTED", "PodGpuUsage", "PodUsageReported"]

POD_USAGE_REPORTED = "telemetry.pod.usage.v1"


class PodGpuUsage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One pod on one GPU over the window."""

    namespace: Name
    pod: Name
    gpu_uuid: Name
    tenant: Name
    """the queue charged for the pod (``PodBound.queue``), else its namespace"""
    gpu_milli: Milli
    """share of the GPU allocated to the pod (1000 = the whole GPU)"""
    seconds: Seconds
    """how long within the window the pod held the GPU"""
    gpu_seconds_allocated: NonNegFloat
    """``gpu_milli / 1000 * seconds``"""
    gpu_seconds_used: NonNegFloat
    """sum of the pod's attributed utilisation (fraction of the whole GPU) times elapsed seconds"""
    util_pct_avg: Percent
    """attributed utilisation, percent of the whole GPU, averaged over ``seconds``"""
    util_pct_max: Percent
    mem_used_mib_avg: NonNegFloat
    mem_used_mib_max: NonNegFloat
    pod_uid: Label | None = None
    attribution: Label = "share"


class PodUsageReported(Event, frozen=True, kw_only=True, tag=POD_USAGE_REPORTED):
    """Per-pod usage of the GPUs of one node over ``[window_start, window_start + window_s)``."""

    node: Name
    window_start: Timestamp
    window_s: Annotated[float, Meta(gt=0)]
    usage: tuple[PodGpuUsage, ...] = ()


#: the events this module defines (the registry maps each to its subject, its tag)
EVENTS: tuple[type[Event], ...] = (PodUsageReported,)
