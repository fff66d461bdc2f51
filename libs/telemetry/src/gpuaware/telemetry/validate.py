"""What the collector refuses to store, and why: checks a decoded batch before it is written.

Decoding already enforces the contract's types and ranges (a negative power, a utilisation of 140,
a NaN or an infinity in a bounded column, garbage bytes: the bus dead-letters those before a handler
runs). What remains are values each plausible alone but absurd together or in context, and batches
no agent should send:

    code               when
    oversized          more GPUs in one batch than ``Limits.max_gpus`` (a node has at most a few dozen)
    duplicate_gpu      the same GPU twice in one batch
    unknown_gpu        a GPU its node never announced (the node's inventory is known and lacks it)
    no_inventory       the node announced no inventory at all (yet): retried, then dead-lettered
    bad_timestamp      ``sampled_at`` not finite, or further in the future than ``max_future_s``
    absurd_value       memory used above the total, power far above the limit, a temperature or
                       clock no GPU reaches

A rejected batch is rejected whole, with a reason naming the GPU and the metric: the agent's frame
already turns a single absurd sensor value into "missing", so a batch that still carries one comes
from a broken producer, and storing half of it would hide that. ``no_inventory`` is the only
transient code (the inventory may still be on its way); the collector retries it a few times.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Set
from dataclasses import dataclass
from itertools import repeat
from typing import NamedTuple

from gpuaware.schemas import GpuSampled

__all__ = ["TRANSIENT_CODES", "Limits", "Rejection", "check_batch"]

TRANSIENT_CODES = frozenset({"no_inventory"})


@dataclass(frozen=True, slots=True)
class Limits:
    max_gpus: int = 64
    """GPUs in one batch; the largest nodes have 16, NVL72 trays 4"""
    max_future_s: float = 300.0
    """how far ahead of the collector's clock a sample may be (clock skew)"""
    power_over_limit: float = 1.5
    """``power_w`` may exceed ``power_limit_w`` by this factor (short excursions); beyond is absurd"""
    max_temperature_c: float = 125.0
    """GPUs shut down around 100 degrees; a reading above this is a broken sensor"""
    max_sm_clock_mhz: int = 4000


class Rejection(NamedTuple):
    code: str
    detail: str

    @property
    def transient(self) -> bool:
        return self.code in TRANSIENT_CODES

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


def _first_above(values: tuple, limits: tuple | float) -> int | None:
    """Index of the first value above its limit (None values and limits never are), or None.

    The common case (no None, nothing above) runs in C: ``map``/``max`` over the tuples; only a
    column holding None or a value above its limit takes the Python loop that finds the index."""
    try:
        if isinstance(limits, tuple):
            if not any(map(operator.gt, values, limits)):
                return None
        elif not values or max(values) <= limits:
            return None
    except TypeError:  # a None somewhere: compare value by value
        pass
    if isinstance(limits, tuple):
        for i, (v, lim) in enumerate(zip(values, limits, strict=True)):
            if v is not None and lim is not None and v > lim:
                return i
        return None
    for i, v in enumerate(values):
        if v is not None and v > limits:
            return i
    return None


def check_batch(batch: GpuSampled, *, known: Mapping[str, Set[str]] | None = None, now: float | None = None,
                limits: Limits | None = None) -> Rejection | None:
    """The first reason to refuse ``batch``, or None. ``known`` maps node -> announced GPU UUIDs
    (None: do not check); ``now`` is the collector's clock (None: do not check the future)."""
    lim = limits or Limits()
    n = len(batch.gpu_uuid)
    if n > lim.max_gpus:
        return Rejection("oversized", f"{n} GPUs in one batch from node {batch.node} (limit {lim.max_gpus})")
    if len(set(batch.gpu_uuid)) != n:
        dup = next(u for i, u in enumerate(batch.gpu_uuid) if u in batch.gpu_uuid[:i])
        return Rejection("duplicate_gpu", f"GPU {dup} appears twice in the batch of node {batch.node}")
    if not math.isfinite(batch.sampled_at) or (now is not None and batch.sampled_at > now + lim.max_future_s):
        return Rejection("bad_timestamp", f"sampled_at {batch.sampled_at} of node {batch.node} is not plausible "
                                          f"(collector clock {now})")
    if known is not None:
        gpus = known.get(batch.node)
        if gpus is None:
            return Rejection("no_inventory", f"node {batch.node} announced no inventory")
        missing = [u for u in batch.gpu_uuid if u not in gpus]
        if missing:
            return Rejection("unknown_gpu", f"GPU {missing[0]} is not in the inventory of node {batch.node}"
                                            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    # plain loops over the columns, no per-value objects: this runs for every batch the collector takes
    if batch.mem_used_mib and batch.mem_total_mib:
        i = _first_above(batch.mem_used_mib, batch.mem_total_mib)
        if i is not None:
            return _absurd(batch, i, f"mem_used_mib {batch.mem_used_mib[i]} > mem_total_mib {batch.mem_total_mib[i]}")
    if batch.power_w and batch.power_limit_w:
        try:
            plain = min(batch.power_limit_w) > 0  # type: ignore[type-var,operator]  # a None raises TypeError, caught
        except TypeError:
            plain = False
        ceiling = (tuple(map(operator.mul, batch.power_limit_w, repeat(lim.power_over_limit))) if plain else
                   tuple(None if x is None or x <= 0 else lim.power_over_limit * x for x in batch.power_limit_w))
        i = _first_above(batch.power_w, ceiling)
        if i is not None:
            return _absurd(batch, i, f"power_w {batch.power_w[i]} > {lim.power_over_limit} x power_limit_w "
                                     f"{batch.power_limit_w[i]}")
    for name in ("temperature_c", "mem_temperature_c"):
        i = _first_above(getattr(batch, name), lim.max_temperature_c)
        if i is not None:
            return _absurd(batch, i, f"{name} {getattr(batch, name)[i]} > {lim.max_temperature_c}")
    i = _first_above(batch.sm_clock_mhz, lim.max_sm_clock_mhz)
    if i is not None:
        return _absurd(batch, i, f"sm_clock_mhz {batch.sm_clock_mhz[i]} > {lim.max_sm_clock_mhz}")
    return None


def _absurd(batch: GpuSampled, i: int, what: str) -> Rejection:
    return Rejection("absurd_value", f"GPU {batch.gpu_uuid[i]} of node {batch.node}: {what}")
