"""Simulated GPU fleet: N nodes x M GPUs whose load follows real traces, with injectable faults.

It feeds the demo, the benchmarks and every test, so three properties matter more than realism of
the last watt:

* **Deterministic.** A sample is a pure function of ``(seed, now)``: the per-tick noise comes from a
  counter-based generator (Philox keyed by the seed, counter = the second), faults are functions of
  elapsed time, and construction draws from one seeded stream. Same seed -> same samples, whatever
  the order or rate of the calls; time comes from the caller (``sample(now)``) or an injectable
  clock, never from the wall clock inside.
* **Fast.** Sampling 10,000 GPUs is a fixed number of numpy operations over per-pod and per-GPU
  arrays (trace lookup by fancy index, ``bincount`` from pods to GPUs); there is no per-GPU Python
  loop on the sampling path. Node backends slice one cached fleet-wide frame per tick.
* **Attributable.** Load is carried by pods assigned to GPUs (``assign``/``release``, a share in
  thousandths of a GPU), so a GPU's utilisation is the sum of its pods' and the ground truth per pod
  is available (``pod_utilization``) to test the agent's attribution.

The physical model is deliberately simple and monotone: power rises linearly with utilisation from
the model's idle draw to 80 % of its limit, temperature with power, clocks drop to idle when the GPU
is idle and scale down under power capping or thermal slowdown; the numbers of an idle and a busy
A100 match the dcgm-exporter sample (61 W / 210 MHz idle; ~98 % -> ~315 W, 1410 MHz).
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gpuaware.gpu.backend import Clock, system_clock
from gpuaware.gpu.events import EventKind, FrameWatch, GpuEvent
from gpuaware.gpu.faults import EccErrorGrowth, Fault, GpuRef, PowerCap, ThermalRunaway, XidBurst
from gpuaware.gpu.frame import GpuFrame
from gpuaware.gpu.models import GpuModel, model
from gpuaware.gpu.topology import Topology
from gpuaware.gpu.traces import TraceBank, UtilTrace, default_traces, shared_data_dir
from gpuaware.schemas import GpuInfo, MigInstance, MigMode, NodeInventory, ThrottleReason, simulated_as

__all__ = ["FleetNode", "FleetSpec", "PodLoad", "PodShare", "SimulatedFleet", "SimulatedNode"]

_UUID_NS = uuidlib.UUID("5f1b6c1e-2d0a-4f7e-9a55-6770756177e1")
_DGX_BUS = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")
_INF = np.inf


@dataclass(frozen=True, slots=True)
class FleetNode:
    """One node of a simulated fleet (what to build, not placement's ``NodeSpec``): ``model`` is any
    name the GPU catalog resolves (``A100-80GB``, ``T4``, ``V100M32``, an NVML name); ``topology`` (a
    parsed ``nvidia-smi topo -m``) sets islands and NUMA; ``mig`` creates MIG instances:
    ``{gpu index: ("3g.40gb", "3g.40gb")}``."""

    name: str
    model: str = "A100-80GB"
    gpus: int = 8
    topology: Topology | None = None
    rack: str | None = None
    zone: str | None = None
    mig: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FleetSpec:
    """What to simulate. ``occupancy`` is the share of GPUs given a whole-GPU pod at start."""

    nodes: tuple[FleetNode, ...]
    seed: int = 0
    occupancy: float = 0.75
    traces: Literal["auto", "synthetic"] | Sequence[UtilTrace] = "auto"
    shared_data: Path | None = None
    """where GenTD26/Helios live; None = ``GPUAWARE_SHARED_DATA`` or ``../shared/data``"""
    noise_pct: float = 2.0
    """noise on synthetic levels of allocation-driven pods; real duty cycles are replayed verbatim"""
    cluster: str = "default"

    @classmethod
    def uniform(
        cls,
        nodes: int,
        gpus_per_node: int = 8,
        model: str = "A100-80GB",
        *,
        prefix: str = "gpu-node",
        **kwargs: Any,
    ) -> FleetSpec:
        width = max(3, len(str(nodes - 1)))
        specs = tuple(FleetNode(f"{prefix}-{k:0{width}d}", model, gpus_per_node) for k in range(nodes))
        return cls(nodes=specs, **kwargs)


@dataclass(frozen=True, slots=True)
class PodLoad:
    """A pod's load on one GPU: ``milli`` thousandths of it, replaying ``trace`` (index or name;
    None = seeded choice) from ``offset_s`` into the trace (None = seeded)."""

    name: str
    namespace: str = "default"
    milli: int = 1000
    trace: int | str | None = None
    offset_s: float | None = None
    memory_mib: int | None = None
    """framebuffer the pod holds; None = a seeded 40-90 % of its share of the GPU"""


@dataclass(frozen=True, slots=True)
class PodShare:
    """A pod as assigned: the resolved trace, offset and memory."""

    namespace: str
    name: str
    gpu_uuid: str
    milli: int
    trace: str
    offset_s: float
    memory_mib: int


class SimulatedFleet:
    """The whole simulated cluster; ``node(name)`` gives a ``GpuBackend`` for one node."""

    def __init__(self, spec: FleetSpec, *, clock: Clock = system_clock) -> None:
        if not spec.nodes:
            raise ValueError("a fleet needs at least one node")
        if len({n.name for n in spec.nodes}) != len(spec.nodes):
            raise ValueError("node names repeat")
        self.spec = spec
        self.clock = clock
        self._rng = np.random.default_rng([spec.seed, 0xF1EE7])
        self._key = np.array([spec.seed & (2**64 - 1), 0x6770_7561_7761_7265], dtype=np.uint64)
        if isinstance(spec.traces, str):
            root = spec.shared_data if spec.shared_data is not None else shared_data_dir()
            traces = (
                default_traces(root, spec.seed) if spec.traces == "auto" else default_traces(None, spec.seed)
            )
        else:
            traces = tuple(spec.traces)
        self.bank = TraceBank(traces)
        self._build_gpus()
        self._pods: list[PodShare] = []
        self._pod_params: list[tuple[float, float, float]] = []  # level, rank, tensor ratio
        self._pods_dirty = True
        self._pa: dict[str, np.ndarray] = {}
        self._faults_init()
        self._cache: tuple[float, GpuFrame] | None = None
        self._auto_assign(spec.occupancy)

    # --- construction ---------------------------------------------------------------------------------
    def _build_gpus(self) -> None:
        nodes = self.spec.nodes
        self.nodes = tuple(n.name for n in nodes)
        self._node_spec = {n.name: n for n in nodes}
        self._models: dict[str, GpuModel] = {n.name: simulated_as(model(n.model)) for n in nodes}
        sizes = [n.gpus for n in nodes]
        self.bounds = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        total = int(self.bounds[-1])
        self.n_gpus = total
        node_of = np.repeat(np.arange(len(nodes)), sizes)
        self.gpu_index = np.concatenate([np.arange(s) for s in sizes]).astype(np.int64)
        self.uuids = tuple(
            f"GPU-{uuidlib.uuid5(_UUID_NS, f'{self.spec.seed}/{n.name}/{i}')}"
            for n in nodes
            for i in range(n.gpus)
        )
        self._row_of_uuid = {u: r for r, u in enumerate(self.uuids)}

        def per_gpu(attr: str, dtype: Any = np.float64) -> np.ndarray:
            return np.repeat(
                np.array([getattr(self._models[n.name], attr) for n in nodes], dtype=dtype), sizes
            )

        self.mem_total = per_gpu("memory_mib", np.int64)
        self.power_limit = per_gpu("power_limit_w")
        self.idle_power = per_gpu("idle_power_w")
        self.sm_max = per_gpu("sm_clock_max_mhz")
        self.sm_idle = per_gpu("sm_clock_idle_mhz")
        self.mem_clock = per_gpu("mem_clock_mhz")
        self.slowdown = per_gpu("slowdown_temp_c")
        self.nvlinks = per_gpu("nvlink_links", np.int64)
        self.row_remap = per_gpu("row_remapping", bool)
        self.base_temp = self._rng.uniform(27.0, 35.0, size=total)
        self._node_of = node_of

    def _auto_assign(self, occupancy: float) -> None:
        if occupancy <= 0:
            return
        chosen = np.flatnonzero(self._rng.random(self.n_gpus) < occupancy)
        for r in chosen.tolist():
            node = self.nodes[self._node_of[r]]
            self.assign(r, PodLoad(name=f"sim-{node}-g{int(self.gpu_index[r])}", namespace="sim"))

    # --- pods -----------------------------------------------------------------------------------------
    def _row(self, gpu: GpuRef) -> int:
        if isinstance(gpu, str):
            try:
                return self._row_of_uuid[gpu]
            except KeyError:
                raise KeyError(f"no GPU {gpu!r} in this fleet") from None
        if isinstance(gpu, tuple):
            node, index = gpu
            k = self.nodes.index(node)
            if not 0 <= index < self.bounds[k + 1] - self.bounds[k]:
                raise KeyError(f"node {node} has no GPU {index}")
            return int(self.bounds[k] + index)
        if not 0 <= gpu < self.n_gpus:
            raise KeyError(f"GPU row {gpu} outside 0..{self.n_gpus - 1}")
        return int(gpu)

    def _pick_trace(self) -> int:
        """Seeded choice: first a source (GenTD26, Helios, synthetic) evenly, then a trace in it."""
        source = int(self._rng.integers(len(self.bank.sources)))
        candidates = np.flatnonzero(self.bank.source_of == source)
        return int(candidates[self._rng.integers(len(candidates))])

    def assign(self, gpu: GpuRef, pod: PodLoad) -> PodShare:
        """Put ``pod`` on a GPU; its load adds to whatever else runs there (capped at 100 %)."""
        row = self._row(gpu)
        if not 0 < pod.milli <= 1000:
            raise ValueError(f"pod {pod.namespace}/{pod.name}: milli {pod.milli} outside 1..1000")
        if isinstance(pod.trace, str):
            trace = self.bank.index(pod.trace)
        elif isinstance(pod.trace, int):
            if not 0 <= pod.trace < len(self.bank):
                raise ValueError(f"trace index {pod.trace} outside 0..{len(self.bank) - 1}")
            trace = pod.trace
        else:
            trace = self._pick_trace()
        span = float(self.bank.lengths[trace] * self.bank.steps[trace])
        offset = float(pod.offset_s) if pod.offset_s is not None else float(self._rng.uniform(0, span))
        share_mib = int(self.mem_total[row]) * pod.milli // 1000
        memory = (
            pod.memory_mib if pod.memory_mib is not None else int(share_mib * self._rng.uniform(0.4, 0.9))
        )
        level, rank, tensor = self._rng.uniform(55, 98), self._rng.random(), self._rng.uniform(0.25, 0.6)
        share = PodShare(
            pod.namespace,
            pod.name,
            self.uuids[row],
            pod.milli,
            self.bank.names[trace],
            offset,
            min(memory, int(self.mem_total[row])),
        )
        self._pods.append(share)
        self._pod_params.append((level, rank, tensor))
        self._pods_dirty = True
        self._cache = None
        return share

    def release(self, name: str, namespace: str = "default") -> int:
        """Remove a pod from every GPU it was on; returns how many placements were removed."""
        keep = [k for k, p in enumerate(self._pods) if (p.namespace, p.name) != (namespace, name)]
        removed = len(self._pods) - len(keep)
        self._pods = [self._pods[k] for k in keep]
        self._pod_params = [self._pod_params[k] for k in keep]
        self._pods_dirty = True
        self._cache = None
        return removed

    def assignments(self, node: str | None = None) -> dict[str, tuple[PodShare, ...]]:
        """GPU UUID -> the pods on it (every GPU of the node/fleet, empty tuple when idle)."""
        rows = range(self.n_gpus) if node is None else range(*self._span(node))
        out: dict[str, list[PodShare]] = {self.uuids[r]: [] for r in rows}
        for p in self._pods:
            if p.gpu_uuid in out:
                out[p.gpu_uuid].append(p)
        return {u: tuple(ps) for u, ps in out.items()}

    def _span(self, node: str) -> tuple[int, int]:
        k = self.nodes.index(node)
        return int(self.bounds[k]), int(self.bounds[k + 1])

    def _pod_arrays(self) -> dict[str, np.ndarray]:
        if self._pods_dirty:
            p = self._pods
            params = np.array(self._pod_params, dtype=np.float64).reshape(-1, 3)
            self._pa = {
                "gpu": np.array([self._row_of_uuid[x.gpu_uuid] for x in p], dtype=np.int64),
                "trace": np.array([self.bank.index(x.trace) for x in p], dtype=np.int64),
                "offset": np.array([x.offset_s for x in p], dtype=np.float64),
                "share": np.array([x.milli / 1000 for x in p], dtype=np.float64),
                "memory": np.array([x.memory_mib for x in p], dtype=np.float64),
                "level": params[:, 0],
                "rank": params[:, 1],
                "tensor": params[:, 2],
            }
            self._pods_dirty = False
        return self._pa

    def _pod_load(self, now: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per pod at ``now``: utilisation contribution (% of its GPU), memory held (MiB), tensor %."""
        pa = self._pod_arrays()
        if len(pa["gpu"]) == 0:
            return np.zeros(0), np.zeros(0), np.zeros(0)
        v = self.bank.values(pa["trace"], now, pa["offset"])
        alloc = self.bank.allocation[pa["trace"]]
        noise = rng.normal(0.0, self.spec.noise_pct, size=len(v)) if self.spec.noise_pct > 0 else 0.0
        active = ~alloc | (pa["rank"] < v)
        busy = np.where(alloc, active * np.clip(pa["level"] + noise, 0, 100), np.clip(v, 0, 100))
        util = busy * pa["share"]
        memory = np.where(alloc, active * pa["memory"], pa["memory"] * (0.9 + 0.001 * np.clip(v, 0, 100)))
        return util, memory, util * pa["tensor"]

    def pod_utilization(self, now: float) -> dict[tuple[str, str, str], float]:
        """Ground truth: (namespace, pod, GPU UUID) -> the pod's contribution to that GPU's util %."""
        util, _, _ = self._pod_load(now, self._tick_rng(now))
        return {(p.namespace, p.name, p.gpu_uuid): float(u) for p, u in zip(self._pods, util, strict=True)}

    # --- faults ---------------------------------------------------------------------------------------
    def _faults_init(self) -> None:
        n = self.n_gpus
        self._ecc = {"start": np.full(n, _INF), "sbe": np.zeros(n), "dbe": np.zeros(n)}
        self._therm = {"start": np.full(n, _INF), "end": np.full(n, _INF), "slope": np.zeros(n)}
        self._cap = {"start": np.full(n, _INF), "end": np.full(n, _INF), "watts": np.zeros(n)}
        self._xid_t = np.zeros(0)
        self._xid_row = np.zeros(0, dtype=np.int64)
        self._xid_code = np.zeros(0, dtype=np.int64)

    def inject(self, *faults: Fault) -> None:
        for f in faults:
            row = self._row(f.gpu)
            if isinstance(f, EccErrorGrowth):
                self._ecc["start"][row], self._ecc["sbe"][row], self._ecc["dbe"][row] = (
                    f.start,
                    f.corrected_per_hour,
                    f.uncorrected_per_hour,
                )
            elif isinstance(f, ThermalRunaway):
                end = f.start + f.duration_s if f.duration_s is not None else _INF
                self._therm["start"][row], self._therm["end"][row] = f.start, end
                self._therm["slope"][row] = f.degrees_per_minute
            elif isinstance(f, PowerCap):
                end = f.start + f.duration_s if f.duration_s is not None else _INF
                self._cap["start"][row], self._cap["end"][row], self._cap["watts"][row] = (
                    f.start,
                    end,
                    f.cap_w,
                )
            elif isinstance(f, XidBurst):
                if f.count < 1 or f.xid < 1:
                    raise ValueError(f"XID burst needs count >= 1 and a positive XID: {f}")
                t = f.start + f.interval_s * np.arange(f.count)
                order_t = np.concatenate((self._xid_t, t))
                order = np.argsort(order_t, kind="stable")
                self._xid_t = order_t[order]
                self._xid_row = np.concatenate((self._xid_row, np.full(f.count, row)))[order]
                self._xid_code = np.concatenate((self._xid_code, np.full(f.count, f.xid)))[order]
            else:  # pragma: no cover - the Fault union is closed
                raise TypeError(f"unknown fault {f!r}")
        self._cache = None

    def xid_events(self, since: float, until: float, node: str | None = None) -> list[GpuEvent]:
        """Scheduled XIDs with ``since < at <= until`` (of one node, or all)."""
        lo, hi = np.searchsorted(self._xid_t, [since, until], side="right")
        out = []
        for k in range(int(lo), int(hi)):
            r = int(self._xid_row[k])
            name = self.nodes[self._node_of[r]]
            if node is not None and name != node:
                continue
            out.append(
                GpuEvent(
                    node=name,
                    gpu_uuid=self.uuids[r],
                    gpu_index=int(self.gpu_index[r]),
                    kind=EventKind.XID,
                    at=float(self._xid_t[k]),
                    code=int(self._xid_code[k]),
                )
            )
        return out

    def _xid_last(self, now: float) -> np.ndarray:
        last = np.zeros(self.n_gpus, dtype=np.int64)
        k = int(np.searchsorted(self._xid_t, now, side="right"))
        if k:
            rows, codes = self._xid_row[:k][::-1], self._xid_code[:k][::-1]
            uniq, first = np.unique(rows, return_index=True)  # first in reversed order = latest
            last[uniq] = codes[first]
        return last

    # --- sampling -------------------------------------------------------------------------------------
    def _tick_rng(self, now: float) -> np.random.Generator:
        tick = int(np.floor(now)) & (2**64 - 1)
        return np.random.Generator(
            np.random.Philox(key=self._key, counter=np.array([tick, 0, 0, 0], np.uint64))
        )

    def sample(self, now: float) -> GpuFrame:
        """Every GPU of the fleet at ``now`` (cached for repeated calls at the same instant)."""
        if self._cache is not None and self._cache[0] == now:
            return self._cache[1]
        frame = self._compute(now)
        self._cache = (now, frame)
        return frame

    def _compute(self, now: float) -> GpuFrame:
        n = self.n_gpus
        rng = self._tick_rng(now)
        pod_util, pod_mem, pod_tensor = self._pod_load(now, rng)
        gpu = self._pod_arrays()["gpu"]
        util = np.clip(np.bincount(gpu, weights=pod_util, minlength=n), 0, 100)
        mem_used = np.minimum(1 + np.bincount(gpu, weights=pod_mem, minlength=n), self.mem_total)
        tensor = np.clip(np.bincount(gpu, weights=pod_tensor, minlength=n), 0, 100)
        busy = util > 0

        # power: linear in utilisation up to 80 % of the board limit, held under an active cap
        capped = (self._cap["start"] <= now) & (now < self._cap["end"])
        limit = np.where(capped, self._cap["watts"], self.power_limit)
        demand = self.idle_power + (0.8 * self.power_limit - self.idle_power) * util / 100
        demand = demand + rng.normal(0.0, 1.0, size=n) * busy
        power_capped = demand > limit
        power = np.clip(np.minimum(demand, limit * 0.99), 0, None)

        # temperature: with power, plus a runaway that climbs while the fault lasts
        span = np.maximum(self.power_limit - self.idle_power, 1.0)
        heating = (self._therm["start"] <= now) & (now < self._therm["end"])
        runaway = self._therm["slope"] * np.where(heating, now - self._therm["start"], 0.0) / 60.0
        temp = self.base_temp + 35.0 * (power - self.idle_power) / span + rng.normal(0, 0.3, size=n) + runaway
        temp = np.clip(temp, 0, 120)
        sw_thermal = temp >= self.slowdown
        hw_thermal = temp >= self.slowdown + 5
        mem_temp = np.clip(temp - 9.0 * util / 100 + 2.0, 0, 120)

        # clocks and the reasons they are held down
        factor = np.where(power_capped, limit / np.maximum(demand, 1e-9), 1.0)
        factor = factor * np.where(sw_thermal, np.maximum(0.5, 1 - 0.04 * (temp - self.slowdown)), 1.0)
        sm = np.where(busy, np.maximum(self.sm_idle, self.sm_max * factor), self.sm_idle)
        reasons = (
            np.where(~busy, ThrottleReason.GPU_IDLE, 0)
            | np.where(power_capped & busy, ThrottleReason.SW_POWER_CAP, 0)
            | np.where(sw_thermal, ThrottleReason.SW_THERMAL_SLOWDOWN, 0)
            | np.where(hw_thermal, ThrottleReason.HW_THERMAL_SLOWDOWN | ThrottleReason.HW_SLOWDOWN, 0)
        )

        # memory errors grow linearly from the fault's start
        hours = np.where(self._ecc["start"] <= now, now - self._ecc["start"], 0.0) / 3600.0
        corrected = np.floor(self._ecc["sbe"] * hours).astype(np.int64)
        uncorrected = np.floor(self._ecc["dbe"] * hours).astype(np.int64)
        remap = self.row_remap
        columns = {
            "util_pct": util,
            "mem_util_pct": np.clip(util * 0.44, 0, 100),
            "mem_used_mib": mem_used,
            "mem_total_mib": self.mem_total,
            "temperature_c": np.round(temp, 1),
            "mem_temperature_c": np.round(mem_temp, 1),
            "power_w": np.round(power, 3),
            "power_limit_w": limit,
            "sm_clock_mhz": sm,
            "mem_clock_mhz": self.mem_clock,
            "throttle_reasons": reasons,
            "ecc_corrected_volatile": corrected,
            "ecc_uncorrected_volatile": uncorrected,
            "ecc_corrected_aggregate": corrected,
            "ecc_uncorrected_aggregate": uncorrected,
            "retired_pages": np.where(remap, -1, uncorrected + corrected // 10),
            "remapped_rows_correctable": np.where(remap, 0, -1),
            "remapped_rows_uncorrectable": np.where(remap, np.minimum(uncorrected, 512), -1),
            "row_remap_pending": np.where(remap, (uncorrected > 0).astype(np.int64), -1),
            "xid_last": self._xid_last(now),
            "pcie_replay": np.zeros(n, dtype=np.int64),
            "nvlink_up": np.where(self.nvlinks > 0, self.nvlinks, -1),
            "tensor_active_pct": tensor,
        }
        return GpuFrame.build(
            sampled_at=now,
            nodes=self.nodes,
            bounds=self.bounds,
            gpu_uuid=self.uuids,
            gpu_index=self.gpu_index,
            columns=columns,
        )

    # --- inventory --------------------------------------------------------------------------------------
    def inventory(self, node: str, *, source: str | None = None) -> NodeInventory:
        spec = self._node_spec[node]
        m = self._models[node]
        s, _ = self._span(node)
        topo = spec.topology if spec.topology is not None and len(spec.topology.gpus) == spec.gpus else None
        if topo is not None:
            islands: Sequence[str | None] = topo.island_ids(node)
        elif m.nvlink_links and spec.gpus > 1:
            islands = [f"{node}/nvl0"] * spec.gpus
        else:
            islands = [None] * spec.gpus
        memory_mib = m.memory_mib
        assert memory_mib is not None, "a simulatable model has its memory size"
        gpus = []
        for i in range(spec.gpus):
            uuid = self.uuids[s + i]
            instances = self._mig_instances(node, uuid, m, spec.mig.get(i, ()))
            numa = topo.numa_node(i) if topo is not None else (i * 2 // spec.gpus if spec.gpus > 1 else 0)
            gpus.append(
                GpuInfo(
                    uuid=uuid,
                    index=i,
                    model=m.nvml_name,
                    memory_mib=memory_mib,
                    pci_bus_id=f"00000000:{_DGX_BUS[i] if spec.gpus <= 8 else f'{16 + 8 * i:02X}'}:00.0",
                    compute_capability=m.compute_capability,
                    tensor_cores=m.tensor_cores,
                    fp8=m.fp8,
                    nvlink_links=(topo.nvlink_links(i) if topo is not None else m.nvlink_links)
                    if islands[i]
                    else 0,
                    nvlink_island=islands[i],
                    numa_node=numa,
                    power_limit_w=m.power_limit_w,
                    mig_mode=MigMode.ENABLED
                    if instances
                    else (MigMode.DISABLED if m.mig_profiles else MigMode.UNSUPPORTED),
                    mig_profiles=m.mig_profiles,
                    mig_instances=instances,
                )
            )
        return NodeInventory(
            source=source or f"sim/{node}",
            emitted_at=self.clock(),
            cluster=self.spec.cluster,
            node=node,
            gpus=tuple(gpus),
            rack=spec.rack,
            zone=spec.zone,
            driver_version="550.90.07",
            cuda_version="12.4",
            labels=dict(spec.labels),
        )

    def _mig_instances(
        self, node: str, uuid: str, m: GpuModel, layout: Sequence[str]
    ) -> tuple[MigInstance, ...]:
        if not layout:
            return ()
        profiles = {p.name: p for p in m.mig_profiles}
        unknown = [p for p in layout if p not in profiles]
        if unknown:
            raise ValueError(f"{node}: {m.nvml_name} has no MIG profile(s) {unknown}; known: {sorted(profiles)}")
        if sum(profiles[p].slices for p in layout) > 7:
            raise ValueError(f"{node}: MIG layout {list(layout)} needs more than 7 compute slices")
        return tuple(
            MigInstance(
                uuid=f"MIG-{uuidlib.uuid5(_UUID_NS, f'{uuid}/{k}')}",
                profile=p,
                gpu_instance_id=k + 1,
                compute_instance_id=0,
                memory_mib=profiles[p].memory_mib,
            )
            for k, p in enumerate(layout)
        )

    def inventories(self) -> list[NodeInventory]:
        return [self.inventory(n) for n in self.nodes]

    # --- per-node backends --------------------------------------------------------------------------------
    def node(self, name: str) -> SimulatedNode:
        if name not in self._node_spec:
            raise KeyError(f"no node {name!r} in this fleet")
        return SimulatedNode(self, name)

    def backends(self) -> list[SimulatedNode]:
        return [SimulatedNode(self, n) for n in self.nodes]


class SimulatedNode:
    """A ``GpuBackend`` for one node of a ``SimulatedFleet`` (a view; the fleet does the work)."""

    def __init__(self, fleet: SimulatedFleet, node: str) -> None:
        self.fleet = fleet
        self.node = node
        self._watch = FrameWatch(xid=False, ecc=True, remap=True, throttle=True)
        self._pending: list[GpuEvent] = []
        self._cursor = fleet.clock()
        self._closed = False

    def inventory(self) -> NodeInventory:
        return self.fleet.inventory(self.node)

    def sample(self, now: float) -> GpuFrame:
        frame = self.fleet.sample(now).for_node(self.node)
        self._pending += self._watch.update(frame)
        return frame

    def events(self, timeout: float = 0.0) -> list[GpuEvent]:
        """Derived events of the samples taken so far plus the scheduled XIDs up to the clock's now.
        Never blocks: simulated time only moves when the clock does."""
        now = self.fleet.clock()
        out = self._pending + self.fleet.xid_events(self._cursor, now, self.node)
        self._pending, self._cursor = [], max(self._cursor, now)
        return sorted(out, key=lambda e: e.at)

    def close(self) -> None:
        self._closed = True
        self._pending.clear()
