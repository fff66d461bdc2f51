"""gpuaware.sim.twin: the digital twin of a GPU cluster - the world, never a scheduler.

    nodes = default_cluster(16)                      # or openb_cluster() when ../shared/data is there
    pods = generate(spec_for_cluster(total_gpus, load=0.8), seed=7)   # gpuaware.sim.workload_gen
    twin = Twin(nodes, pods, start=1_767_225_600.0, seed=7)
    for event in twin.advance(twin.next_event_at()):  # Arrived | Finished | CheckpointAnswered
        ...
    twin.bind(uid, node, [Slice(gpu_uuid, 500, 8192)], decision_id="d-1")   # or raises Refused(reason)
    twin.evict(uid, checkpointed=True)
    twin.fleet                                        # the SimulatedFleet the telemetry agent samples
    twin.fleet.inject(*to_faults(decode_faults(text), twin.start))   # faults planned as data (faults.py)
    twin.elastic_job(uid)                             # an elastic worker's job: progress, grows, shrinks
    twin.power_off(node); twin.power_on(node)         # an idle node off; on again after its boot delay

``world`` holds the truth and the event queue, ``elastic`` an elastic job's shared progress and its
restart delay per resize, ``power`` each node's power state and boot delay, ``cluster`` the node sets; the clock and the workload sources live beside
this package (``gpuaware.sim.clock``, ``gpuaware.sim.workload_gen``).
"""

from gpuaware.sim.twin.cluster import (
    NODE_KINDS,
    NodeKind,
    default_cluster,
    gpu_memory_mib,
    openb_cluster,
    openb_node_list,
)
from gpuaware.sim.twin.elastic import (
    RESIZE_RESTART_DELAY_S,
    ElasticJob,
    JobRate,
    job_key,
    linear_rate,
    throughput_rate,
)
from gpuaware.sim.twin.faults import (
    EccSpec,
    FaultSpec,
    PowerCapSpec,
    ThermalSpec,
    XidSpec,
    decode_faults,
    encode_faults,
    to_faults,
)
from gpuaware.sim.twin.pace import PaceChange, Pacer
from gpuaware.sim.twin.power import DEFAULT_BOOT_DELAY_S, NodePower, PowerState
from gpuaware.sim.twin.world import (
    Arrived,
    Binding,
    CheckpointAnswered,
    Eviction,
    Finished,
    PodState,
    Refusal,
    Refused,
    Slice,
    Twin,
    TwinEvent,
    TwinGpu,
    Withdrawn,
)

__all__ = [
    "DEFAULT_BOOT_DELAY_S",
    "NODE_KINDS",
    "RESIZE_RESTART_DELAY_S",
    "Arrived",
    "Binding",
    "CheckpointAnswered",
    "EccSpec",
    "ElasticJob",
    "Eviction",
    "FaultSpec",
    "Finished",
    "JobRate",
    "NodeKind",
    "NodePower",
    "PaceChange",
    "Pacer",
    "PodState",
    "PowerCapSpec",
    "PowerState",
    "Refusal",
    "Refused",
    "Slice",
    "ThermalSpec",
    "Twin",
    "TwinEvent",
    "TwinGpu",
    "Withdrawn",
    "XidSpec",
    "decode_faults",
    "default_cluster",
    "encode_faults",
    "gpu_memory_mib",
    "job_key",
    "linear_rate",
    "openb_cluster",
    "openb_node_list",
    "throughput_rate",
    "to_faults",
]
