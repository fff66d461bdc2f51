"""gpuaware.gpu: every way of seeing GPUs, behind one interface. The only module importing
``pynvml`` and ``prometheus_client``.

    backend = NvmlBackend()                                   # a real node (GpuBackendUnavailable without one)
    backend = DcgmExporterBackend("http://127.0.0.1:9400/metrics")   # a node running dcgm-exporter
    text = render_dcgm_metrics(inventory, frame)              # the inverse: a node as dcgm-exporter text
    fleet = SimulatedFleet(FleetSpec.uniform(4, 8, seed=7), clock=ManualClock())
    backend = fleet.node("gpu-node-000")                      # a simulated node

    inventory = backend.inventory()                           # NodeInventory, topology included
    frame = backend.sample(now)                               # GpuFrame: numpy columns per metric
    batch = frame.to_messages(source="agent/n1", interval_s=1.0)   # [GpuSampled], one per node
    for event in backend.events(timeout=0.5): ...             # XID / ECC / thermal / power

    topo = parse_topo_matrix(text)                            # `nvidia-smi topo -m`
    topo.nvlink_islands(), topo.numa_node(0), topo.island_ids("n1")

Module docstrings explain each part: ``backend`` (the Protocol), ``frame`` (columnar samples),
``events``, ``nvml`` (+ ``nvml_support``: why a metric is empty on a board), ``dcgm``, ``topology``, ``simulated`` (+ ``traces``, ``faults``, ``models``).
GPU models come from the one catalog, ``gpuaware.schemas.gpus``, shared with placement and the twin.
"""

from gpuaware.gpu.backend import Clock, GpuBackend, ManualClock, system_clock
from gpuaware.gpu.dcgm import (
    DcgmEntity,
    DcgmExporterBackend,
    DcgmScrape,
    PodRef,
    parse_dcgm_metrics,
)
from gpuaware.gpu.dcgm_render import render_dcgm_metrics
from gpuaware.gpu.errors import GpuBackendError, GpuBackendUnavailable, TopologyParseError, TraceError
from gpuaware.gpu.events import APPLICATION_XIDS, EventKind, FrameWatch, GpuEvent
from gpuaware.gpu.faults import EccErrorGrowth, Fault, PowerCap, ThermalRunaway, XidBurst
from gpuaware.gpu.frame import COLUMNS, ColumnSpec, GpuFrame
from gpuaware.gpu.models import MODELS, GpuModel, find_model, model
from gpuaware.gpu.nvml import NvmlBackend
from gpuaware.gpu.nvml_support import NOT_FROM_NVML, NVML_QUERIES, nvml_answers
from gpuaware.gpu.simulated import FleetNode, FleetSpec, PodLoad, PodShare, SimulatedFleet, SimulatedNode
from gpuaware.gpu.topology import Topology, parse_topo_matrix
from gpuaware.gpu.traces import (
    TraceBank,
    UtilTrace,
    default_traces,
    load_gentd26,
    load_helios,
    shared_data_dir,
    synthetic_traces,
)

__all__ = [
    "APPLICATION_XIDS",
    "COLUMNS",
    "MODELS",
    "NOT_FROM_NVML",
    "NVML_QUERIES",
    "Clock",
    "ColumnSpec",
    "DcgmEntity",
    "DcgmExporterBackend",
    "DcgmScrape",
    "EccErrorGrowth",
    "EventKind",
    "Fault",
    "FleetNode",
    "FleetSpec",
    "FrameWatch",
    "GpuBackend",
    "GpuBackendError",
    "GpuBackendUnavailable",
    "GpuEvent",
    "GpuFrame",
    "GpuModel",
    "ManualClock",
    "NvmlBackend",
    "PodLoad",
    "PodRef",
    "PodShare",
    "PowerCap",
    "SimulatedFleet",
    "SimulatedNode",
    "ThermalRunaway",
    "Topology",
    "TopologyParseError",
    "TraceBank",
    "TraceError",
    "UtilTrace",
    "XidBurst",
    "default_traces",
    "find_model",
    "load_gentd26",
    "load_helios",
    "model",
    "nvml_answers",
    "parse_dcgm_metrics",
    "parse_topo_matrix",
    "render_dcgm_metrics",
    "shared_data_dir",
    "synthetic_traces",
    "system_clock",
]
