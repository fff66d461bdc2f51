"""Workloads for the digital twin: pods with arrival times and durations, from a trace or a generator.

A ``SimPod`` is one pod as the world will submit it: what it asks for (the same fields a
``PodPending`` carries, so the binder's translation is one line per field), who it belongs to
(tenant = namespace = quota queue), its class, when it arrives (seconds after the workload's start)
and how long it runs once bound (``None`` = it outlives the run, e.g. a service or a pod the trace
never saw end).

Three sources, all deterministic:

* ``generate(spec, seed)`` - a synthetic mix of tenants and classes (training / inference /
  interactive), Poisson arrivals modulated by a diurnal curve (thinning, one seeded generator), and
  per-class shapes: fractional GPUs for inference and notebooks, whole multi-GPU gangs for training,
  priorities and checkpointability that make preemption meaningful. ``spec_for_cluster`` sizes the
  arrival rate so the offered load is a chosen fraction of the cluster. A share of the multi-GPU
  training jobs is *elastic* (``ClassProfile.elastic``, half by default; ``GeneratorSpec.elastic``
  turns them off): torchrun-style, the job of W GPUs is a gang of W one-GPU worker pods that runs with
  ``ceil(W / 2)`` to W of them (``gang_min_members`` .. ``gang_max_members``), each worker carrying the
  job's work at full width as its duration. Which jobs are elastic comes from a generator of its own,
  so the other pods are the same with elastic jobs on or off.
* ``from_openb(trace_pods, ...)`` (``workload_traces``, as the next) - the Alibaba openb pod list
  (creation/deletion times, fractional GPUs): a time window is cut out; pods already alive at its start arrive at once with what is left
  of their life, the others at their creation time; departures follow ``deletion_time``.
* ``load_philly(path, ...)`` - the Philly trace as the Pollux artifact ships it (``traces/philly.csv``:
  submit time, duration, GPUs, virtual cluster). A virtual cluster becomes a tenant; jobs wider than
  one node become gangs of whole-node pods.

Why generated shapes are tables here and not configuration: they are the *default world*, a
starting point the demo can replay anywhere; a real cluster's mix comes from its trace.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TypeVar

import numpy as np

__all__ = [
    "DEFAULT_CLASSES",
    "DEFAULT_TENANTS",
    "ClassProfile",
    "GeneratorSpec",
    "PodClass",
    "SimPod",
    "Tenant",
    "elastic_range",
    "expected_gpu_seconds",
    "generate",
    "spec_for_cluster",
]

MILLI = 1000
TOPOLOGIES = ("none", "same-nvlink-island", "same-numa", "same-rack")
QOS = ("guaranteed", "burstable", "best-effort")


class PodClass(StrEnum):
    """What kind of work a pod is: decides its shape, priority and how its delay is judged."""

    TRAINING = "training"
    """long, whole GPUs (often several, sometimes a gang), checkpointable, preemptible"""
    INFERENCE = "inference"
    """a serving replica: a fraction of a GPU, high priority, runs for hours; judged by its SLO"""
    INTERACTIVE = "interactive"
    """a notebook or debug session: a small fraction, short, someone waits for it"""
    BATCH = "batch"
    """anything else (CPU-only pods, trace pods without a known class)"""


@dataclass(frozen=True, slots=True)
class SimPod:
    """One pod of a workload (see the module docstring); validated like ``PodPending``."""

    uid: str
    name: str
    namespace: str
    arrival_s: float
    """seconds after the workload's start"""
    duration_s: float | None
    """seconds of work once bound; None = runs past the end of the run"""
    klass: PodClass = PodClass.BATCH
    queue: str = "default"
    cpu_milli: int = 0
    memory_mib: int = 0
    num_gpu: int = 0
    gpu_milli: int = MILLI
    gpu_memory_mib: int = 0
    gpu_types: tuple[str, ...] = ()
    priority: int = 0
    priority_class: str = ""
    checkpointable: bool = False
    deferrable: bool = False
    qos: str = "best-effort"
    gang_id: str | None = None
    gang_min_members: int = 1
    gang_max_members: int = 0
    """an elastic gang's most workers (``PodPending.gang_max_members``); 0 = fixed at ``gang_min_members``"""
    topology: str = "none"

    def __post_init__(self) -> None:
        if not self.uid or not self.name or not self.namespace:
            raise ValueError(f"pod {self.uid!r}: uid, name and namespace must be non-empty")
        if self.arrival_s < 0 or (self.duration_s is not None and self.duration_s < 0):
            raise ValueError(f"pod {self.uid}: negative arrival {self.arrival_s} or duration {self.duration_s}")
        for name in ("cpu_milli", "memory_mib", "num_gpu", "gpu_memory_mib"):
            if getattr(self, name) < 0:
                raise ValueError(f"pod {self.uid}: {name} is negative")
        if not 0 <= self.gpu_milli <= MILLI:
            raise ValueError(f"pod {self.uid}: gpu_milli {self.gpu_milli} outside 0..{MILLI}")
        if self.gpu_milli < MILLI and self.num_gpu != 1:
            raise ValueError(f"pod {self.uid}: gpu_milli {self.gpu_milli} < {MILLI} needs num_gpu == 1")
        if self.gang_min_members > 1 and self.gang_id is None:
            raise ValueError(f"pod {self.uid}: gang_min_members > 1 needs a gang_id")
        if self.gang_max_members and (self.gang_id is None or self.gang_max_members < self.gang_min_members):
            raise ValueError(f"pod {self.uid}: gang_max_members {self.gang_max_members} needs a gang_id and "
                             f"at least gang_min_members {self.gang_min_members}")
        if self.qos not in QOS:
            raise ValueError(f"pod {self.uid}: qos {self.qos!r} not one of {QOS}")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"pod {self.uid}: topology {self.topology!r} not one of {TOPOLOGIES}")

    @property
    def elastic(self) -> bool:
        """A worker of an elastic job: its gang may run with more workers than its minimum."""
        return self.gang_id is not None and self.gang_max_members > max(1, self.gang_min_members)

    @property
    def gpu_milli_total(self) -> int:
        """GPU compute asked, thousandths of a GPU, across all GPUs."""
        return self.gpu_milli if self.num_gpu == 1 else MILLI * self.num_gpu


# --- the generator ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClassProfile:
    """The shape of one pod class. Choices are (value, weight) tables; durations are log-normal."""

    klass: PodClass
    gpus: tuple[tuple[int, float], ...]
    """GPUs per job; a job wider than ``max_gpus_per_pod`` becomes a gang of whole-node pods"""
    milli: tuple[tuple[int, float], ...] = ((MILLI, 1.0),)
    """share of the GPU for 1-GPU pods (1000 = whole)"""
    gpu_memory_mib: tuple[tuple[int, float], ...] = ((0, 1.0),)
    """memory asked per GPU of fractional pods (0 = no explicit limit)"""
    median_s: float = 3600.0
    sigma: float = 1.0
    """log-normal spread of the duration (natural log)"""
    min_s: float = 60.0
    max_s: float = 7 * 86400.0
    priority: int = 0
    priority_class: str = ""
    qos: str = "best-effort"
    checkpointable: float = 0.0
    """probability that a pod of this class can checkpoint"""
    deferrable: float = 0.0
    cpu_per_gpu_milli: int = 8000
    memory_per_gpu_mib: int = 65536
    topology_multi_gpu: str = "none"
    """topology preference of pods with more than one GPU"""
    gpu_types: tuple[tuple[tuple[str, ...], float], ...] = (((), 1.0),)
    """acceptable GPU models ((), any)"""
    elastic: float = 0.0
    """probability that a job of this class asking for more than one GPU is elastic (see the module
    docstring): it runs with half to all of its GPUs, one worker pod per GPU"""

    def __post_init__(self) -> None:
        if not 0.0 <= self.elastic <= 1.0:
            raise ValueError(f"class {self.klass}: elastic {self.elastic} outside 0..1")


DEFAULT_CLASSES: tuple[ClassProfile, ...] = (
    ClassProfile(
        PodClass.TRAINING, gpus=((1, 0.35), (2, 0.2), (4, 0.2), (8, 0.2), (16, 0.05)),
        median_s=2 * 3600.0, sigma=1.2, min_s=300.0, max_s=3 * 86400.0, priority=100,
        priority_class="batch-training", qos="burstable", checkpointable=0.8, deferrable=0.5,
        cpu_per_gpu_milli=8000, memory_per_gpu_mib=65536, topology_multi_gpu="same-nvlink-island",
        gpu_types=(((), 0.6), (("H100", "A100"), 0.3), (("V100M32", "V100M16"), 0.1)), elastic=0.5,
    ),
    ClassProfile(
        PodClass.INFERENCE, gpus=((1, 1.0),), milli=((250, 0.3), (500, 0.4), (1000, 0.3)),
        gpu_memory_mib=((8192, 0.4), (12288, 0.4), (0, 0.2)),
        median_s=6 * 3600.0, sigma=0.8, min_s=600.0, max_s=2 * 86400.0, priority=1000,
        priority_class="inference-critical", qos="guaranteed",
        cpu_per_gpu_milli=4000, memory_per_gpu_mib=16384,
        gpu_types=(((), 0.7), (("T4", "L4", "A100"), 0.3)),
    ),
    ClassProfile(
        PodClass.INTERACTIVE, gpus=((1, 1.0),), milli=((100, 0.25), (200, 0.25), (300, 0.2), (500, 0.3)),
        gpu_memory_mib=((4096, 0.5), (8192, 0.5)),
        median_s=1800.0, sigma=0.9, min_s=120.0, max_s=8 * 3600.0, priority=500,
        priority_class="interactive", qos="burstable",
        cpu_per_gpu_milli=2000, memory_per_gpu_mib=8192,
    ),
)


@dataclass(frozen=True, slots=True)
class Tenant:
    """A team: its share of arrivals and its mix of classes (class -> weight)."""

    name: str
    weight: float
    classes: tuple[tuple[PodClass, float], ...]


DEFAULT_TENANTS: tuple[Tenant, ...] = (
    Tenant("team-vision", 0.35, ((PodClass.TRAINING, 0.5), (PodClass.INFERENCE, 0.3), (PodClass.INTERACTIVE, 0.2))),
    Tenant("team-nlp", 0.35, ((PodClass.TRAINING, 0.6), (PodClass.INFERENCE, 0.2), (PodClass.INTERACTIVE, 0.2))),
    Tenant("team-recsys", 0.2, ((PodClass.TRAINING, 0.2), (PodClass.INFERENCE, 0.6), (PodClass.INTERACTIVE, 0.2))),
    Tenant("research", 0.1, ((PodClass.TRAINING, 0.4), (PodClass.INTERACTIVE, 0.6))),
)


@dataclass(frozen=True, slots=True)
class GeneratorSpec:
    """What to generate: how long, how fast, whose pods and of which shapes."""

    duration_s: float = 86400.0
    """arrivals happen in [0, duration_s)"""
    rate_per_hour: float = 120.0
    """mean arrival rate of jobs (a gang counts once)"""
    diurnal_amplitude: float = 0.5
    """rate(t) = mean * (1 + a * sin(2 pi (t - peak + 6h) / 1 day)); 0 = flat"""
    peak_hour: float = 14.0
    tenants: tuple[Tenant, ...] = DEFAULT_TENANTS
    classes: tuple[ClassProfile, ...] = DEFAULT_CLASSES
    max_gpus_per_pod: int = 8
    namespace_prefix: str = ""
    uid_prefix: str = "gen"
    max_pods: int = 0
    """stop after this many pods (0 = no limit)"""
    available_models: tuple[str, ...] = ()
    """GPU models the cluster has: type constraints are cut to these (a constraint left empty means
    any GPU), so no generated pod asks for a model that does not exist; () = keep them as written"""
    elastic: bool = True
    """make elastic jobs as the class profiles say (False: every job has the fixed shape it asks for)"""

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.rate_per_hour < 0:
            raise ValueError("duration_s must be > 0 and rate_per_hour >= 0")
        if not 0 <= self.diurnal_amplitude <= 1:
            raise ValueError(f"diurnal_amplitude {self.diurnal_amplitude} outside 0..1")
        known = {c.klass for c in self.classes}
        for t in self.tenants:
            missing = {k for k, _ in t.classes} - known
            if missing:
                raise ValueError(f"tenant {t.name} uses classes without a profile: {sorted(missing)}")


V = TypeVar("V")


def _pick(rng: np.random.Generator, table: Sequence[tuple[V, float]]) -> V:
    """One value of a (value, weight) table; one uniform draw whatever the table's length."""
    r = rng.random() * sum(w for _, w in table)
    for value, w in table:
        r -= w
        if r < 0:
            return value
    return table[-1][0]


def _rate_factor(spec: GeneratorSpec, t: float) -> float:
    if spec.diurnal_amplitude == 0:
        return 1.0
    phase = 2 * math.pi * (t - (spec.peak_hour - 6.0) * 3600.0) / 86400.0
    return 1.0 + spec.diurnal_amplitude * math.sin(phase)


def _lognormal_mean(p: ClassProfile) -> float:
    """Mean of the clipped log-normal duration (clipping ignored above: an estimate for sizing)."""
    return min(p.max_s, max(p.min_s, p.median_s * math.exp(p.sigma**2 / 2)))


def expected_gpu_seconds(spec: GeneratorSpec) -> float:
    """Expected GPU-seconds one arriving job asks for (fractions count as fractions)."""
    profiles = {c.klass: c for c in spec.classes}
    total_w = sum(t.weight for t in spec.tenants)
    out = 0.0
    for t in spec.tenants:
        cw = sum(w for _, w in t.classes)
        for k, w in t.classes:
            p = profiles[k]
            gw = sum(x for _, x in p.gpus)
            gpus = sum(g * x for g, x in p.gpus) / gw
            mw = sum(x for _, x in p.milli)
            share = sum(m * x for m, x in p.milli) / mw / MILLI
            one = share if gpus == 1 and all(g == 1 for g, _ in p.gpus) else gpus
            out += (t.weight / total_w) * (w / cw) * one * _lognormal_mean(p)
    return out


def spec_for_cluster(total_gpus: int, *, load: float = 0.8, duration_s: float = 86400.0,
                     **overrides: object) -> GeneratorSpec:
    """A spec whose offered load is ``load`` times the cluster's GPUs, on average over a day.

    Offered load = rate x E[GPU-seconds per job] / GPUs (Little's law), so
    rate_per_hour = load * GPUs * 3600 / E[GPU-seconds per job].
    """
    base = replace(GeneratorSpec(duration_s=duration_s), **overrides)  # type: ignore[arg-type]  # overrides: GeneratorSpec fields
    if total_gpus <= 0 or load < 0:
        raise ValueError("total_gpus must be > 0 and load >= 0")
    rate = load * total_gpus * 3600.0 / expected_gpu_seconds(base)
    return replace(base, rate_per_hour=rate)


def generate(spec: GeneratorSpec = GeneratorSpec(), seed: int = 0) -> tuple[SimPod, ...]:
    """Pods arriving over ``spec.duration_s``, sorted by arrival; the same seed gives the same pods."""
    rng = np.random.default_rng([seed, 0x5EED])
    elastic_rng = np.random.default_rng([seed, 0xE1A5])  # its own stream: the other pods do not move
    profiles = {c.klass: c for c in spec.classes}
    peak = spec.rate_per_hour / 3600.0 * (1.0 + spec.diurnal_amplitude)
    pods: list[SimPod] = []
    t = 0.0
    job = 0
    if peak <= 0:
        return ()
    tenant_table = [(tn, tn.weight) for tn in spec.tenants]
    while True:
        t += float(rng.exponential(1.0 / peak))
        if t >= spec.duration_s:
            break
        if rng.random() * (1.0 + spec.diurnal_amplitude) > _rate_factor(spec, t):
            continue  # thinning: keeps arrivals at rate(t)
        tenant: Tenant = _pick(rng, tenant_table)
        klass: PodClass = _pick(rng, tenant.classes)
        p = profiles[klass]
        gpus = int(_pick(rng, p.gpus))
        milli = int(_pick(rng, p.milli)) if gpus == 1 else MILLI
        gmem = int(_pick(rng, p.gpu_memory_mib)) if milli < MILLI else 0
        types: tuple[str, ...] = _pick(rng, p.gpu_types)
        if spec.available_models:
            types = tuple(t for t in types if t in spec.available_models)
        duration = float(np.clip(p.median_s * math.exp(p.sigma * rng.standard_normal()), p.min_s, p.max_s))
        checkpointable = bool(rng.random() < p.checkpointable)
        deferrable = bool(rng.random() < p.deferrable)
        namespace = f"{spec.namespace_prefix}{tenant.name}"
        elastic = (spec.elastic and gpus > 1 and p.elastic > 0 and milli == MILLI
                   and bool(elastic_rng.random() < p.elastic))
        widths = [1] * gpus if elastic else split_gang(gpus, spec.max_gpus_per_pod)
        gang = f"{spec.uid_prefix}-{job:06d}" if len(widths) > 1 else None
        min_members, max_members = (elastic_range(gpus) if elastic else (len(widths) if gang else 1, 0))
        for member, width in enumerate(widths):
            suffix = f"-{member}" if gang else ""
            uid = f"{spec.uid_prefix}-{job:06d}{suffix}"
            pods.append(SimPod(
                uid=uid, name=f"{klass.value}-{tenant.name}-{job:06d}{suffix}", namespace=namespace,
                arrival_s=round(t, 3), duration_s=round(duration, 3), klass=klass, queue=tenant.name,
                cpu_milli=p.cpu_per_gpu_milli * width if milli == MILLI else p.cpu_per_gpu_milli // 2,
                memory_mib=p.memory_per_gpu_mib * width if milli == MILLI else p.memory_per_gpu_mib // 2,
                num_gpu=width, gpu_milli=milli, gpu_memory_mib=gmem, gpu_types=types, priority=p.priority,
                priority_class=p.priority_class, checkpointable=checkpointable, deferrable=deferrable,
                qos=p.qos, gang_id=gang, gang_min_members=min_members, gang_max_members=max_members,
                topology=p.topology_multi_gpu if width > 1 or gang else "none",
            ))
        job += 1
        if spec.max_pods and len(pods) >= spec.max_pods:
            break
    return tuple(pods)


def elastic_range(workers: int) -> tuple[int, int]:
    """(min, max) workers of an elastic job of ``workers`` one-GPU workers: it runs on half (rounded
    up) to all of them. 4 -> (2, 4), 3 -> (2, 3), 2 -> (1, 2)."""
    if workers < 2:
        raise ValueError(f"an elastic job needs at least 2 workers, not {workers}")
    return math.ceil(workers / 2), workers


def split_gang(gpus: int, per_pod: int) -> list[int]:
    """12 GPUs on 8-GPU nodes -> [8, 4]: whole-node pods, the rest in one more."""
    if gpus <= per_pod:
        return [gpus]
    return [per_pod] * (gpus // per_pod) + ([gpus % per_pod] if gpus % per_pod else [])

