"""A GPU's fault effects rendered as per-step telemetry over its fault-free temperature."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from gpuaware.sim.fleet_faults.data import HOUR
from gpuaware.sim.fleet_faults.plan import Effects, Point

__all__ = ["Rendered", "render"]


@dataclass(frozen=True, slots=True)
class Rendered:
    """One GPU's telemetry: observation ``k`` at ``times[k]`` covers ``(times[k] - step, times[k]]``.

    ``before`` holds what happened before the window (hourly, plus every event time), for a tracker
    that has run for months: ``(time, ce_cumulative, ue_cumulative, xids)``; the window's counters
    continue from its last values."""

    times: np.ndarray
    temperature_c: np.ndarray
    thermal: np.ndarray
    """throttle bits: 0, SW thermal slowdown (32), or with HW thermal + HW slowdown (32|64|8)"""
    ce: np.ndarray
    ue: np.ndarray
    pcie: np.ndarray
    present: np.ndarray
    xids: dict[int, tuple[int, ...]]
    before: list[tuple[float, int, int, tuple[int, ...]]]


_SW_THERMAL, _HW_THERMAL, _HW_SLOWDOWN = 0x20, 0x40, 0x8


def render(fx: Effects, *, start: float, step_s: float, n: int, base_temp_c: np.ndarray, slowdown_c: float,
           history_step_s: float = HOUR) -> Rendered:
    """Per-step telemetry of one GPU over ``base_temp_c`` (its temperature without faults, one per step)."""
    times = start + step_s * np.arange(1, n + 1, dtype=np.float64)
    temp = np.asarray(base_temp_c, dtype=np.float64).copy()
    for h in fx.heats:
        if h.anchor is not None:
            line = slowdown_c + 5.0 - h.rate_c_per_min * (h.anchor - times) / 60.0
            temp = np.where(times < h.anchor, np.maximum(temp, line), temp)
            held = (times >= h.anchor) & (times < h.end)
            temp = np.where(held, np.maximum(temp, slowdown_c + h.over_c), temp)
        else:
            frac = np.clip((times - h.start) / max(h.ramp_s, 1.0), 0.0, 1.0)
            temp = temp + np.where((times >= h.start) & (times < h.end), h.delta_c * frac, 0.0)
    temp = np.clip(temp, 0.0, 120.0)
    thermal = np.where(temp >= slowdown_c, _SW_THERMAL, 0) | np.where(
        temp >= slowdown_c + 5.0, _HW_THERMAL | _HW_SLOWDOWN, 0)

    def step_of(at: float) -> int:
        return math.ceil((at - start) / step_s) - 1

    ce = np.zeros(n, dtype=np.int64)
    ue = np.zeros(n, dtype=np.int64)
    xids: dict[int, tuple[int, ...]] = {}
    early: list[Point] = []
    for p in fx.points:
        if p.at <= start:
            early.append(p)
            continue
        k = step_of(p.at)
        if k >= n:
            continue
        ce[k] += p.ce
        ue[k] += p.ue
        if p.xids:
            xids[k] = xids.get(k, ()) + p.xids
    # PCIe replays: the integral of the rate over each step, as whole counts
    cum = np.zeros(n + 1)
    edges = np.concatenate(([start], times))
    for r in fx.replays:
        a = np.clip(edges, r.start, r.end)
        slope = (r.rate1 - r.rate0) / max(r.end - r.start, 1e-9)
        # integral of rate0 + slope * (t - start) per minute, from r.start to a
        x = a - r.start
        cum += (r.rate0 * x + 0.5 * slope * x * x) / 60.0
    pcie = np.diff(np.floor(cum)).astype(np.int64)
    present = np.ones(n, dtype=bool)
    for o in fx.outages:
        present &= ~((times > o.start) & (times <= o.end))
    before: list[tuple[float, int, int, tuple[int, ...]]] = []
    ce0 = ue0 = 0
    if early:
        # from one step before the first event (a tracker's first observation is its counters' baseline)
        grid = np.arange(start, min(p.at for p in early) - history_step_s - 1.0, -history_step_s)[::-1]
        marks = sorted({*grid.tolist(), *(p.at for p in early)})
        by_time: dict[float, list[Point]] = defaultdict(list)
        for p in early:
            by_time[p.at].append(p)
        for t in marks:
            if any(o.start < t <= o.end for o in fx.outages) and t not in by_time:
                continue
            xs: tuple[int, ...] = ()
            for p in by_time.get(t, ()):
                ce0 += p.ce
                ue0 += p.ue
                xs += p.xids
            before.append((t, ce0, ue0, xs))
    return Rendered(times=times, temperature_c=np.round(temp, 1), thermal=thermal, ce=ce0 + np.cumsum(ce),
                    ue=ue0 + np.cumsum(ue), pcie=np.cumsum(pcie), present=present, xids=xids, before=before)
