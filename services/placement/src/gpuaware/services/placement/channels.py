"""The subjects placement reads and writes, typed (one `bus.Channel` each, its subject the event's tag),
and the dedupe id of each message it publishes: a redelivered pending pod decided again yields the same
id, so JetStream stores the decision once."""

from __future__ import annotations

from gpuaware import bus, schemas

PENDING = bus.event_channel(schemas.PodPending, id_of=lambda p: f"{p.pod_uid}/{p.attempt}")
DECIDED = bus.event_channel(schemas.PlacementDecided, id_of=lambda d: d.decision_id)
UNSCHEDULABLE = bus.event_channel(schemas.PodUnschedulable, id_of=lambda u: f"{u.pod_uid}/{u.attempt}/{u.reason}")
EXPLAINED = bus.event_channel(schemas.PlacementExplained)
INVENTORY = bus.event_channel(schemas.NodeInventory)
HEALTH = bus.event_channel(schemas.GpuStateChanged)
SCORED = bus.event_channel(schemas.GpuScored)
ROLLUPS = bus.event_channel(schemas.GpuRolledUp)
FORECASTS = bus.event_channel(schemas.GpuUtilPredicted)
DEMAND_FORECASTS = bus.event_channel(schemas.DemandPredicted)
BOUND = bus.event_channel(schemas.PodBound)
BIND_FAILED = bus.event_channel(schemas.PodBindFailed)
PREEMPTED = bus.event_channel(schemas.PodPreempted)
FINISHED = bus.event_channel(schemas.PodFinished)
POWER_RECOMMENDED = bus.event_channel(schemas.NodePowerRecommended, id_of=lambda r: r.recommendation_id)
POWER_CHANGED = bus.event_channel(schemas.NodePowerChanged)
