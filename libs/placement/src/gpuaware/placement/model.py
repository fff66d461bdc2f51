"""The vocabulary of placement: GPU models, nodes and pod requests.

GPU models are the one catalog's records (`gpuaware.schemas.gpus`: `GpuModel`, `GPU_CATALOG`,
`CAPABILITIES`), re-exported here; placement reads their name, `memory_mib`, capability flags and
`has()` and ignores the physical envelope the simulator uses. Nodes and requests are placement's own.

Why plain frozen dataclasses and not msgspec Structs: this package is pure (numpy, plus the contract
package for the catalog); the wire types live in `schemas/` and the services translate between the
two. Everything here is validated on construction so that a bad request fails where it enters,
naming the field, instead of deep inside a vectorised scoring pass.

Units follow the openb trace and the FGD simulator: CPU in milli-cores, memory in MiB, GPU compute
in milli-GPUs (1000 = one whole GPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuaware.schemas import CAPABILITIES, GPU_CATALOG, GpuModel

__all__ = [
    "CAPABILITIES",
    "DEFAULT_MILLI_CPU_REQUEST",
    "GPU_CATALOG",
    "MAX_SPEC_CPU",
    "MAX_SPEC_GPU",
    "MILLI",
    "GpuModel",
    "NodeSpec",
    "PodRequest",
    "RequestError",
]

MILLI = 1000
"""Milli-GPUs in one whole GPU."""

MAX_SPEC_CPU = 128_000
"""Largest node CPU in the openb cluster (milli-cores); BestFit and DotProd normalise by it."""

MAX_SPEC_GPU = 8 * MILLI
"""Largest node GPU capacity (milli-GPUs, 8 GPUs); BestFit, DotProd and GpuClustering normalise by it."""

DEFAULT_MILLI_CPU_REQUEST = 100
"""kube-scheduler counts a pod asking for no CPU as 100m when scoring (GetNonzeroRequests)."""


BEST_EFFORT_QOS = frozenset({"best-effort", "besteffort", "be"})
"""QoS spellings of best-effort work: the contract's, Kubernetes', and the openb trace's ("BE")."""


class RequestError(ValueError):
    """A pod request or node description is invalid. Permanent: fix the input, retrying cannot help."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node as inventoried: capacity, GPU model and count, and where it sits."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_model: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    rack: str = ""
    zone: str = ""
    nvlink_islands: tuple[int, ...] = ()  # island id per GPU index; () = no NVLink
    numa_nodes: tuple[int, ...] = ()  # NUMA node per GPU index; () = unknown

    def __post_init__(self) -> None:
        if not self.name:
            raise RequestError("node name is empty")
        for fld in ("cpu_milli", "memory_mib", "num_gpu"):
            if getattr(self, fld) < 0:
                raise RequestError(f"node {self.name}: {fld} is negative ({getattr(self, fld)})")
        if self.num_gpu > 0 and not self.gpu_model:
            raise RequestError(f"node {self.name}: {self.num_gpu} GPUs but no GPU model")
        for fld in ("nvlink_islands", "numa_nodes"):
            value = getattr(self, fld)
            if value and len(value) != self.num_gpu:
                raise RequestError(f"node {self.name}: {fld} has {len(value)} entries for {self.num_gpu} GPUs")


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What one pod asks for.

    `gpu_milli` is the share of each GPU: below 1000 only when `num_gpu == 1` (a GPU-sharing pod),
    exactly 1000 for whole-GPU pods, 0 for CPU-only pods. `gpu_types` lists the acceptable GPU
    models in the order given (empty = any); `capabilities` and `min_gpu_memory_mib` are further
    constraints on the GPU model. The remaining fields (QoS, priority, tenant queue, gang, topology)
    travel with the request for the quota and gang layers; the FGD-era scorers ignore them.
    """

    name: str
    cpu_milli: int
    memory_mib: int = 0
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_memory_mib: int = 0
    gpu_types: tuple[str, ...] = ()
    capabilities: frozenset[str] = field(default_factory=frozenset)
    min_gpu_memory_mib: int = 0
    qos: str = ""
    priority: int = 0
    queue: str = ""
    gang_id: str = ""
    gang_min_members: int = 0
    gang_max_members: int = 0
    """an elastic gang's most members (torchrun's ``--nnodes=MIN:MAX``): members beyond the minimum run
    when GPUs are idle and are the first taken back (a shrink); 0: the gang is fixed at its minimum"""
    topology: str = ""  # "" | "nvlink" (all GPUs on one NVLink island) | "numa" (one NUMA node)
    job_type: str = ""  # workload class for heterogeneity-aware scoring (e.g. "ResNet-50 (batch size 64)")
    checkpointable: bool = False  # it can save its state and resume: evicting it loses no work
    job_preemptions: int = 0
    """times the pod's job was preempted before this pod existed (a controller's replacement pod has a
    new uid and attempt 0): the cap on preemptions per job counts these as well"""
    priority_class: str = ""
    """its PriorityClass name: the forecast head-room tells latency-sensitive classes by it"""
    deferrable: bool = False
    """it may start later than it could (a batch job's own word): the forecast head-room may hold it back"""

    def __post_init__(self) -> None:
        if not self.name:
            raise RequestError("pod name is empty")
        if min(self.cpu_milli, self.memory_mib, self.num_gpu, self.gpu_milli, self.gpu_memory_mib,
               self.min_gpu_memory_mib) < 0:
            for fld in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_memory_mib", "min_gpu_memory_mib"):
                if getattr(self, fld) < 0:
                    raise RequestError(f"pod {self.name}: {fld} is negative ({getattr(self, fld)})")
        if self.num_gpu == 0 and self.gpu_milli != 0:
            raise RequestError(f"pod {self.name}: gpu_milli={self.gpu_milli} without any GPU (num_gpu=0)")
        if self.num_gpu > 0 and not 0 < self.gpu_milli <= MILLI:
            raise RequestError(f"pod {self.name}: gpu_milli must be in 1..{MILLI}, got {self.gpu_milli}")
        if self.num_gpu > 1 and self.gpu_milli != MILLI:
            raise RequestError(f"pod {self.name}: a {self.num_gpu}-GPU pod must take whole GPUs (gpu_milli=1000)")
        unknown = set(self.capabilities) - CAPABILITIES if self.capabilities else None
        if unknown:
            raise RequestError(f"pod {self.name}: unknown capabilities {sorted(unknown)}")
        if self.gang_max_members and self.gang_max_members < max(1, self.gang_min_members):
            raise RequestError(f"pod {self.name}: gang_max_members {self.gang_max_members} is below "
                               f"gang_min_members {self.gang_min_members}")
        if self.topology not in ("", "nvlink", "numa"):
            raise RequestError(f"pod {self.name}: unknown topology preference {self.topology!r}")

    @property
    def tolerates_failure(self) -> bool:
        """Work a failing GPU would not hurt much: it checkpoints, or it is best-effort. Only such pods
        may go to DEGRADED GPUs (health-scoring's contract, schemas/health.py)."""
        return self.checkpointable or self.qos.lower() in BEST_EFFORT_QOS

    @property
    def elastic(self) -> bool:
        """A member of an elastic gang (it may run with more members than its minimum)."""
        return bool(self.gang_id) and self.gang_max_members > max(1, self.gang_min_members)

    @property
    def is_gpu_share(self) -> bool:
        """True for a pod that takes part of one GPU."""
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def score_cpu_milli(self) -> int:
        """CPU as the scorers see it (kube-scheduler's non-zero default for pods asking none)."""
        return self.cpu_milli if self.cpu_milli > 0 else DEFAULT_MILLI_CPU_REQUEST

    @property
    def gpu_spec(self) -> str:
        return "|".join(self.gpu_types)

    @property
    def spec_key(self) -> tuple[int, int, int, str]:
        """What the scorers depend on: (score CPU, GPUs, milli per GPU, GPU types). Memory only filters."""
        return (self.score_cpu_milli, self.num_gpu, self.gpu_milli, self.gpu_spec)

    @property
    def affinity_tag(self) -> int:
        """GpuClustering's label: -1 CPU-only, 0 GPU-sharing ("share"), k for whole k-GPU pods ("k-gpu")."""
        if self.num_gpu == 0:
            return -1
        return 0 if self.gpu_milli < MILLI else self.num_gpu
