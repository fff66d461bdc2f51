"""gpuaware.telemetry: the pure logic of the node agent and the collector (no I/O, no clock).

    edge = NodeEdge("node-a", source="agent/node-a")          # adaptive sampling + flags + usage
    out = edge.observe(backend.sample(now), now, events=..., allocations=ledger.by_gpu())
    out.sampled                                               # GpuSampled to publish, or None
    out.usage                                                 # PodUsageReported of a closed window

    reason = check_batch(batch, known=inventory, now=now)     # the collector's refusal, or None
    columns = to_columns(batches)                             # -> gpuaware.tsdb.SampleColumns(*columns)
    messages = rollup_messages(rows, window=..., ...)         # GpuRolledUp per node

Services own the I/O (NATS, PostgreSQL, the GPU backend) and the clock; everything here is table-
tested with simulated time. Module docstrings explain each part: ``adaptive``, ``anomaly``,
``attribution``, ``edge``, ``validate``, ``columns``, ``rollup``.
"""

from gpuaware.telemetry.adaptive import AdaptivePolicy, AdaptiveSampler, Deadbands, Decision, SendReason
from gpuaware.telemetry.anomaly import AnomalyDetector, flag_names
from gpuaware.telemetry.attribution import (
    AllocationLedger,
    PodAlloc,
    UsageAccumulator,
    allocations_by_gpu,
    attribute,
    from_pod_shares,
    tenant_of,
)
from gpuaware.telemetry.columns import DB_COLUMN_OF, TABLE_METRIC_COLUMNS, ColumnBatch, to_columns
from gpuaware.telemetry.edge import EdgeOutput, NodeEdge, subset
from gpuaware.telemetry.rollup import WIDTH_S, WindowClock, rollup_messages, rollup_msg_id
from gpuaware.telemetry.validate import TRANSIENT_CODES, Limits, Rejection, check_batch

__all__ = [
    "DB_COLUMN_OF",
    "TABLE_METRIC_COLUMNS",
    "TRANSIENT_CODES",
    "WIDTH_S",
    "AdaptivePolicy",
    "AdaptiveSampler",
    "AllocationLedger",
    "AnomalyDetector",
    "ColumnBatch",
    "Deadbands",
    "Decision",
    "EdgeOutput",
    "Limits",
    "NodeEdge",
    "PodAlloc",
    "Rejection",
    "SendReason",
    "UsageAccumulator",
    "WindowClock",
    "allocations_by_gpu",
    "attribute",
    "check_batch",
    "flag_names",
    "from_pod_shares",
    "rollup_messages",
    "rollup_msg_id",
    "subset",
    "tenant_of",
    "to_columns",
]
