"""What a scheduling run achieved, as pure functions over what happened to each pod and GPU.

The demo records every event of the loop (pending, bound, preempted, finished) and hands them here;
nothing in this module does I/O or reads a clock, so the same numbers come out of a replay, a test
table or a notebook. Conventions, chosen so that a scheduler cannot look better by starving pods:

* Times are seconds of the run's (virtual) clock; ``horizon`` is where the run was cut.
* Queue delay is first start - arrival. A pod still waiting at the horizon counts with the wait it
  has had so far (a lower bound), rather than being left out: leaving it out would reward the
  scheduler that never starts the hard pods.
* JCT (job completion time) is finish - arrival, over pods that finished: compare it together with
  how many finished.
* SLO attainment counts a pod as met when it started within the threshold, missed when it started
  later *or* is still waiting past the threshold at the horizon; a pod waiting less than the
  threshold at the horizon is undecided and left out.
* Fairness is Jain's index over tenants of the share of their demand served: GPU-seconds held in
  [0, horizon] over GPU-seconds asked if every pod had started on arrival (both clipped at the horizon).
  Hour by hour (``tenant_windows``, ``fair_share_over_windows``) it is what a tenant feels: in each
  window each tenant with demand (pods running or waiting) is entitled to its water-filled fair share
  of the cluster, Jain's index is taken over those tenants' ``min(1, held / fair share)``, and the worst
  tenant's figure is its time-averaged share of its fair share over the *contended* windows (more GPUs
  wanted than the cluster has), where a scheduler's choices decide who waits.
* Allocation is the GPU compute pods *asked for* and hold (a 0.3-GPU pod counts 0.3 even where it was
  given a whole GPU), over the cluster's capacity; "occupied" counts GPUs holding anything. The gap
  between the two is what whole-GPU scheduling wastes.
* Fragmentation is the share of free GPU compute that sits on partially used GPUs (unusable by a
  whole-GPU pod).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuaware.quota import jain_index, normalised_shares, water_fill  # quota's, jain_index re-exported
from gpuaware.schemas import percentile

__all__ = [
    "MILLI",
    "AllocationSample",
    "FairShareFigures",
    "GpuLedger",
    "PodRecord",
    "TenantWindow",
    "Violation",
    "clock_jumps",
    "delay_stats",
    "delays_by_class",
    "fair_share_over_windows",
    "fragmentation",
    "jain_index",
    "jct",
    "queue_delays",
    "slo_attainment",
    "tenant_service",
    "tenant_windows",
    "time_in_system",
    "time_weighted_mean",
    "utilisation_series",
]

MILLI = 1000


# --- per-pod outcomes ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodRecord:
    """One pod's life in a run: who, what it asked, and when it held GPUs."""

    uid: str
    klass: str
    tenant: str
    gpu_milli_total: int
    """GPU compute asked across all its GPUs (thousandths of a GPU)"""
    arrival: float
    intervals: tuple[tuple[float, float | None], ...] = ()
    """bound intervals (start, end); end None = still bound at the horizon"""
    finished: float | None = None
    duration: float | None = None
    """seconds of work it needs once bound (None = unknown / runs past the run)"""

    @property
    def first_start(self) -> float | None:
        return self.intervals[0][0] if self.intervals else None


def queue_delays(pods: Iterable[PodRecord], horizon: float) -> list[float]:
    """First start - arrival; still waiting at ``horizon``: horizon - arrival (a lower bound)."""
    out = []
    for p in pods:
        if p.arrival > horizon:
            continue
        start = p.first_start
        out.append(max(0.0, (start if start is not None and start <= horizon else horizon) - p.arrival))
    return out


def delay_stats(delays: Sequence[float]) -> dict[str, float]:
    return {"n": float(len(delays)), "p50": percentile(delays, 50), "p99": percentile(delays, 99),
            "mean": sum(delays) / len(delays) if delays else math.nan}


def delays_by_class(pods: Iterable[PodRecord], horizon: float) -> dict[str, dict[str, float]]:
    """``delay_stats`` per pod class, plus ``waiting``: pods of the class not started by the horizon."""
    groups: dict[str, list[PodRecord]] = {}
    for p in pods:
        if p.arrival <= horizon:
            groups.setdefault(p.klass, []).append(p)
    out = {}
    for klass in sorted(groups):
        ps = groups[klass]
        stats = delay_stats(queue_delays(ps, horizon))
        stats["waiting"] = float(sum(1 for p in ps if p.first_start is None or p.first_start > horizon))
        out[klass] = stats
    return out


def jct(pods: Iterable[PodRecord]) -> list[float]:
    """finish - arrival of the pods that finished."""
    return [p.finished - p.arrival for p in pods if p.finished is not None]


def time_in_system(pods: Iterable[PodRecord], horizon: float) -> list[float]:
    """Per pod that arrived by ``horizon``: finish - arrival, or horizon - arrival while unfinished (a
    lower bound). Unlike ``jct`` it does not reward a scheduler for finishing fewer, shorter jobs: the
    mean is the average number of jobs in the system over the window / the arrival rate (Little)."""
    out = []
    for p in pods:
        if p.arrival > horizon:
            continue
        end = p.finished if p.finished is not None and p.finished <= horizon else horizon
        out.append(max(0.0, end - p.arrival))
    return out


def slo_attainment(pods: Iterable[PodRecord], threshold_s: float, horizon: float) -> tuple[int, int]:
    """(met, decided) for start-within-``threshold_s`` (see the module docstring)."""
    met = decided = 0
    for p in pods:
        if p.arrival > horizon:
            continue
        start = p.first_start
        if start is not None and start <= horizon:
            decided += 1
            met += (start - p.arrival) <= threshold_s
        elif horizon - p.arrival > threshold_s:
            decided += 1
    return met, decided


def tenant_service(pods: Iterable[PodRecord], horizon: float) -> dict[str, float]:
    """Per tenant: GPU-seconds held in [0, horizon] / GPU-seconds asked (as if started on arrival)."""
    held: dict[str, float] = {}
    asked: dict[str, float] = {}
    for p in pods:
        if p.arrival > horizon:
            continue
        gpus = p.gpu_milli_total / MILLI
        want = horizon - p.arrival if p.duration is None else min(p.duration, horizon - p.arrival)
        asked[p.tenant] = asked.get(p.tenant, 0.0) + gpus * max(0.0, want)
        got = 0.0
        for start, end in p.intervals:
            stop = horizon if end is None else min(end, horizon)
            got += max(0.0, stop - start)
        held[p.tenant] = held.get(p.tenant, 0.0) + gpus * got
    return {t: (held.get(t, 0.0) / asked[t] if asked[t] > 0 else 1.0) for t in sorted(asked)}


@dataclass(frozen=True, slots=True)
class TenantWindow:
    """One window of a run: GPU-seconds each tenant held, and wanted (held + waiting), in [start, end)."""

    start: float
    end: float
    held: Mapping[str, float]
    asked: Mapping[str, float]


def _spread(into: list[dict[str, float]], tenant: str, gpus: float, a: float, b: float, window_s: float) -> None:
    """Add ``gpus`` x the overlap of [a, b) with each window to the windows' ``tenant`` entry."""
    k = int(a // window_s)
    while a < b and k < len(into):
        edge = min(b, (k + 1) * window_s)
        into[k][tenant] = into[k].get(tenant, 0.0) + gpus * (edge - a)
        a, k = edge, k + 1


def tenant_windows(pods: Iterable[PodRecord], horizon: float, window_s: float = 3600.0) -> list[TenantWindow]:
    """Per ``window_s``-long window of [0, horizon] (the last one may be shorter): GPU-seconds each
    tenant held, and wanted. A pod wants its GPUs from its arrival until it finishes (or the horizon),
    running or waiting; it holds them over its bound intervals."""
    if horizon <= 0 or window_s <= 0:
        return []
    n = math.ceil(horizon / window_s)
    held: list[dict[str, float]] = [{} for _ in range(n)]
    asked: list[dict[str, float]] = [{} for _ in range(n)]
    for p in pods:
        if p.arrival >= horizon or p.gpu_milli_total <= 0:
            continue
        gpus = p.gpu_milli_total / MILLI
        end = horizon if p.finished is None else min(p.finished, horizon)
        _spread(asked, p.tenant, gpus, max(0.0, p.arrival), end, window_s)
        for start, stop in p.intervals:
            _spread(held, p.tenant, gpus, max(0.0, start), horizon if stop is None else min(stop, horizon),
                    window_s)
    return [TenantWindow(k * window_s, min(horizon, (k + 1) * window_s), held[k], asked[k]) for k in range(n)]


@dataclass(frozen=True, slots=True)
class FairShareFigures:
    """What tenants felt window by window (see the module docstring); None where nothing was measured."""

    jain_mean: float | None
    """mean over windows with at least two tenants with demand"""
    jain_contended_mean: float | None
    """the same over the contended windows only"""
    windows: int
    """windows Jain was taken over (at least two tenants with demand)"""
    contended_windows: int
    """windows where the tenants wanted more GPUs than the cluster has"""
    tenants: int
    """tenants with demand in at least one contended window (whom the worst-tenant figure is over)"""
    worst_tenant: str | None
    worst_share: float | None
    """the lowest of ``share_of_fair_share``"""
    share_of_fair_share: Mapping[str, float]
    """per tenant: min(1, held / fair share), averaged over the contended windows it had demand in,
    weighted by the windows' lengths"""


def fair_share_over_windows(windows: Sequence[TenantWindow], capacity_gpus: float,
                            weights: Mapping[str, float] | None = None) -> FairShareFigures:
    """Jain over tenants with demand and each tenant's share of its fair share, window by window: a
    window's fair shares water-fill ``capacity_gpus`` over the tenants' mean GPUs wanted (by
    ``weights``, equal when absent); a window is contended when they want more than the cluster has."""
    every: list[float] = []
    contended: list[float] = []
    share_time: dict[str, float] = {}
    time_in: dict[str, float] = {}
    n_contended = 0
    for w in windows:
        length = w.end - w.start
        demand = {t: a / length for t, a in w.asked.items() if length > 0 and a > 1e-9}
        if not demand:
            continue
        fair = water_fill(capacity_gpus, demand, weights or {})
        got = {t: w.held.get(t, 0.0) / length for t in demand}
        is_contended = sum(demand.values()) > capacity_gpus + 1e-9
        if len(demand) >= 2:
            j = jain_index(normalised_shares(got, fair))
            every.append(j)
            if is_contended:
                contended.append(j)
        if not is_contended:
            continue
        n_contended += 1
        for t, f in fair.items():
            if f > 1e-12:
                share_time[t] = share_time.get(t, 0.0) + min(1.0, got[t] / f) * length
                time_in[t] = time_in.get(t, 0.0) + length
    shares = {t: share_time[t] / time_in[t] for t in sorted(time_in)}
    worst = min(shares, key=lambda t: (shares[t], t)) if shares else None
    return FairShareFigures(
        jain_mean=sum(every) / len(every) if every else None,
        jain_contended_mean=sum(contended) / len(contended) if contended else None,
        windows=len(every), contended_windows=n_contended, tenants=len(shares), worst_tenant=worst,
        worst_share=shares[worst] if worst is not None else None, share_of_fair_share=shares)


# --- GPUs over time --------------------------------------------------------------------------------


def fragmentation(used: Mapping[str, int], capacity: int = MILLI) -> float:
    """Free compute on partially used GPUs / all free compute (0 when nothing is free)."""
    free = partial = 0
    for u in used.values():
        f = max(0, capacity - u)
        free += f
        if u > 0:
            partial += f
    return partial / free if free else 0.0


@dataclass(frozen=True, slots=True)
class AllocationSample:
    """The cluster right after an event."""

    t: float
    allocated: float
    """asked GPU compute held / capacity"""
    occupied: float
    """GPUs holding anything / GPUs"""
    fragmentation: float


@dataclass(frozen=True, slots=True)
class Violation:
    """A GPU holding more than it has, and when."""

    t: float
    gpu: str
    milli: int
    memory_mib: int
    pod: str
    holders: tuple[str, ...] = ()
    """every pod the replay has on the GPU then, ``pod`` last (which release it never saw)"""


@dataclass
class GpuLedger:
    """Replays bindings and releases GPU by GPU, sampling allocation and catching over-allocation.

    ``gpus`` maps every GPU uuid to its memory (MiB; 0 = not accounted). ``bind`` takes the slices a
    pod holds (uuid, milli given, memory given) and ``asked_milli`` (what it asked per GPU, for the
    allocation ratio); ``release`` gives back whatever the pod holds (a no-op when it holds nothing).
    """

    gpus: Mapping[str, int]
    samples: list[AllocationSample] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    unknown_gpus: set[str] = field(default_factory=set)
    used: dict[str, int] = field(init=False)
    mem: dict[str, int] = field(init=False)
    _holds: dict[str, tuple[tuple[tuple[str, int, int], ...], int]] = field(init=False, default_factory=dict)
    _asked: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.used = dict.fromkeys(self.gpus, 0)
        self.mem = dict.fromkeys(self.gpus, 0)

    @property
    def capacity(self) -> int:
        return MILLI * len(self.gpus)

    def bind(self, t: float, pod: str, slices: Sequence[tuple[str, int, int]], asked_milli: int) -> None:
        self.release(t, pod, sample=False)
        for uuid, milli, mem in slices:
            if uuid not in self.used:
                self.unknown_gpus.add(uuid)
                self.used[uuid] = self.mem[uuid] = 0
            self.used[uuid] += milli
            self.mem[uuid] += mem
            cap_mem = self.gpus.get(uuid, 0)
            if self.used[uuid] > MILLI or (cap_mem and self.mem[uuid] > cap_mem):
                holders = tuple(p for p, (held, _) in self._holds.items() if any(s[0] == uuid for s in held))
                self.violations.append(Violation(t, uuid, self.used[uuid], self.mem[uuid], pod, (*holders, pod)))
        asked = asked_milli * len(slices)
        self._holds[pod] = (tuple(slices), asked)
        self._asked += asked
        self._sample(t)

    def release(self, t: float, pod: str, *, sample: bool = True) -> bool:
        held = self._holds.pop(pod, None)
        if held is None:
            return False
        slices, asked = held
        for uuid, milli, mem in slices:
            self.used[uuid] -= milli
            self.mem[uuid] -= mem
        self._asked -= asked
        if sample:
            self._sample(t)
        return True

    def holding(self) -> dict[str, tuple[tuple[str, int, int], ...]]:
        return {pod: held[0] for pod, held in self._holds.items()}

    def _sample(self, t: float) -> None:
        n = len(self.used) or 1
        occupied = sum(1 for u in self.used.values() if u > 0)
        s = AllocationSample(t, self._asked / (MILLI * n), occupied / n, fragmentation(self.used))
        if self.samples and self.samples[-1].t == t:
            self.samples[-1] = s  # several events at one instant: the state after the last one
        else:
            self.samples.append(s)


def time_weighted_mean(times: Sequence[float], values: Sequence[float], t0: float, t1: float,
                       initial: float = 0.0) -> float:
    """Mean over [t0, t1] of the step function that takes ``values[i]`` from ``times[i]`` on
    (``initial`` before the first time). NaN for an empty interval."""
    if t1 <= t0:
        return math.nan
    total = 0.0
    current = initial
    prev = t0
    for t, v in zip(times, values, strict=True):
        if t > t1:
            break
        if t > prev:
            total += current * (t - prev)
            prev = t
        current = v
    total += current * (t1 - prev)
    return total / (t1 - t0)


def utilisation_series(samples: Sequence[tuple[float, str, float]], gpus: int, t0: float, t1: float,
                       step: float, gaps: Sequence[tuple[float, float]] = ()) -> tuple[list[float], list[float], float]:
    """Measured GPU utilisation over [t0, t1] from sparse readings ``(t, gpu, util_pct)``, oldest first.

    Each GPU holds its last reading until its next one (the agent sends a GPU when it moved or its
    heartbeat is due, so a held value is what it measured); a GPU not heard from yet counts as idle.
    ``gaps`` are stretches nobody measured (the twin's clock jumped over a quiet night: no wall time
    passed, so no reading could be taken): they are left out of every mean instead of holding the
    last value across them, and a bucket mostly inside one is NaN - a gap in the plot, not a flat line.
    Returns bucket starts, the mean utilisation (0..1) over all ``gpus`` GPUs in each ``step``-long
    bucket, and the mean over the measured part of the interval. NaN means where there is no interval,
    no GPU, or nothing measured."""
    if t1 <= t0 or gpus <= 0 or step <= 0:
        return [], [], math.nan
    edges = [t0 + i * step for i in range(math.ceil((t1 - t0) / step) + 1)]
    edges[-1] = t1
    holes = sorted((max(a, t0), min(b, t1)) for a, b in gaps if b > a and b > t0 and a < t1)
    current: dict[str, float] = {}
    level = 0.0  # sum of the GPUs' current utilisation, 0..gpus
    integral = [0.0] * (len(edges) - 1)
    measured = [0.0] * (len(edges) - 1)
    b = 0
    prev = t0

    def credit(lo: float, hi: float) -> None:
        """Integrate ``level`` over [lo, hi] (inside bucket ``b``) except where it falls in a gap."""
        span = hi - lo
        for a, z in holes:
            if z <= lo:
                continue
            if a >= hi:
                break
            span -= min(hi, z) - max(lo, a)
        integral[b] += level * span
        measured[b] += span

    def advance(to: float) -> None:
        nonlocal b, prev
        while b < len(integral) and to > prev:
            end = min(to, edges[b + 1])
            credit(prev, end)
            prev = end
            if end >= edges[b + 1]:
                b += 1

    for t, gpu, util in samples:
        if t > t1:
            break
        if t > t0:
            advance(t)
        value = min(100.0, max(0.0, util)) / 100.0
        level += value - current.get(gpu, 0.0)
        current[gpu] = value
    advance(t1)
    means = [integral[i] / (measured[i] * gpus) if measured[i] >= 0.5 * (edges[i + 1] - edges[i]) else math.nan
             for i in range(len(integral))]
    total = sum(measured)
    return edges[:-1], means, sum(integral) / (total * gpus) if total > 0 else math.nan


def clock_jumps(clock: Sequence[tuple[float, float]], speed: float, *, factor: float = 3.0) -> list[tuple[float, float]]:
    """Virtual stretches a replay jumped over: between consecutive ``(wall, virtual)`` observations,
    virtual time moved more than ``factor`` times what ``speed`` explains (the twin skips quiet
    stretches at once). Nothing could be measured there; returns (virtual start, virtual end) pairs."""
    out: list[tuple[float, float]] = []
    for (w0, v0), (w1, v1) in itertools.pairwise(clock):
        if v1 - v0 > factor * max(0.0, w1 - w0) * speed and v1 > v0:
            if out and out[-1][1] >= v0:
                out[-1] = (out[-1][0], v1)
            else:
                out.append((v0, v1))
    return out
