"""Decoding is validation: bad values are rejected with an error that names the field, edges pass."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gpuaware.schemas import (
    AdmitReply,
    AlertRaised,
    AlertResolved,
    DemandPredicted,
    ExplainRequest,
    GpuRolledUp,
    GpuSampled,
    GpuScored,
    GpuStateChanged,
    NodeClassVerdict,
    NodeInventory,
    PlacementDecided,
    PodPending,
    QuotaUsageReported,
    fingerprint,
)

# (type, path into the sample's JSON, value, expected error fragment or None for "accepted")
CASES = [
    # gpu_milli is thousandths of one GPU: 1000 is a whole GPU, 1500 is not a fraction
    (PodPending, ["gpu_milli"], 1500, "Expected `int` <= 1000 - at `$.gpu_milli`"),
    (PodPending, ["gpu_milli"], 1000, None),
    # a 1-GPU pod asking 0 thousandths passed the contract and was refused by the engine (issue 16)
    (PodPending, ["gpu_milli"], 0, "`gpu_milli` 0 with `num_gpu` 1: a GPU pod asks 1..1000"),
    (PodPending, ["priority_class"], "x" * 900_000, "Expected `str` of length <= 253 - at `$.priority_class`"),
    (PodPending, ["gpu_types"], ["A100"] * 65, "Expected `array` of length <= 64 - at `$.gpu_types`"),
    (PodPending, ["memory_mib"], -1, "Expected `int` >= 0 - at `$.memory_mib`"),
    (PodPending, ["gpu_memory_mib"], -512, "at `$.gpu_memory_mib`"),
    (PodPending, ["num_gpu"], 2, "`gpu_milli` 500 < 1000 needs `num_gpu` == 1"),  # fractions are single-GPU
    (PodPending, ["topology"], "same-galaxy", "Invalid enum value 'same-galaxy' - at `$.topology`"),
    (PodPending, ["pod_uid"], "", "Expected `str` of length >= 1 - at `$.pod_uid`"),
    (PodPending, ["emitted_at"], -1.0, "at `$.emitted_at`"),
    (PodPending, ["capabilities", "min_memory_mib"], -1, "at `$.capabilities.min_memory_mib`"),
    (PodPending, ["gang_min_members"], 0, "at `$.gang_min_members`"),
    # utilisation is a percentage
    (GpuSampled, ["util_pct", 1], 120.0, "Expected `float` <= 100.0 - at `$.util_pct[1]`"),
    (GpuSampled, ["util_pct", 1], 100.0, None),
    (GpuSampled, ["util_pct", 1], None, None),  # this GPU does not report it
    (GpuSampled, ["mem_used_mib", 0], -1, "at `$.mem_used_mib[0]`"),
    (GpuSampled, ["temperature_c", 2], 900.0, "at `$.temperature_c[2]`"),
    (GpuSampled, ["nvlink_up", 0], 37, "at `$.nvlink_up[0]`"),
    (GpuSampled, ["power_w"], [1.0, 2.0], "column `power_w` has 2 entries, expected 0 or 4"),
    (GpuSampled, ["interval_s"], 0.0, "at `$.interval_s`"),
    (NodeInventory, ["gpus", 0, "memory_mib"], -5, "at `$.gpus[0].memory_mib`"),
    (NodeInventory, ["gpus", 1, "index"], 0, "repeats a uuid or an index"),
    (NodeInventory, ["gpus", 0, "compute_capability"], "eight", "at `$.gpus[0].compute_capability`"),
    (GpuRolledUp, ["gpus", 0, "util_pct", "p95"], 95.0, "max is not the largest"),  # p95 95 > max 90
    (PlacementDecided, ["slices", 0, "gpu_milli"], 1001, "at `$.slices[0].gpu_milli`"),
    (PlacementDecided, ["score"], 100.5, "at `$.score`"),
    (GpuScored, ["score"], -1.0, "at `$.score`"),
    (GpuScored, ["state"], "sick", "Invalid enum value 'sick' - at `$.state`"),
    (GpuStateChanged, ["current"], "healthy", "not a change"),  # previous is healthy too
    (AlertRaised, ["fingerprint"], "not-hex", "at `$.fingerprint`"),
    (AlertRaised, ["severity"], "fatal", "at `$.severity`"),
    (AlertResolved, ["resolved_at"], 0.0, "`resolved_at` is before `started_at`"),
    (DemandPredicted, ["quantiles"], [0.9, 0.5, 0.1], "`quantiles` must increase strictly"),
    (DemandPredicted, ["quantiles", 0], 1.0, "at `$.quantiles[0]`"),
    (DemandPredicted, ["horizon_steps"], 4, "expected 3 quantiles x 4 steps"),
    (QuotaUsageReported, ["queues", 0, "weight"], 0.0, "at `$.queues[0].weight`"),
    (AdmitReply, ["admitted"], False, "`would_reclaim` is only meaningful when `admitted`"),
    (ExplainRequest, ["pod_uid"], None, "give exactly one of `pod_uid` and `pod`"),
]


def _set(doc: Any, path: list, value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


@pytest.mark.parametrize("cls, path, value, error", CASES, ids=[f"{c[0].__name__}-{c[1]}-{c[2]}" for c in CASES])
def test_constraints(cls: type, path: list, value: Any, error: str | None, samples: dict) -> None:
    doc = msgspec.json.decode(msgspec.json.encode(samples[cls]))  # plain, mutable JSON data
    _set(doc, path, value)
    data = msgspec.json.encode(doc)
    if error is None:
        msgspec.json.decode(data, type=cls)
        return
    with pytest.raises(msgspec.ValidationError) as excinfo:
        msgspec.json.decode(data, type=cls)
    assert error in str(excinfo.value)


def test_cross_field_rules_also_hold_on_construction() -> None:
    with pytest.raises(ValueError, match="feasible 1 \\+ rejected 0 != nodes 3"):
        NodeClassVerdict(node_class="x", nodes=3, feasible=1)


@pytest.mark.parametrize(
    "rule, labels, same_as",
    [
        # label order must not change the fingerprint (dedupe across producers)
        ("r", {"a": "1", "b": "2"}, ("r", {"b": "2", "a": "1"})),
    ],
)
def test_fingerprint_is_order_independent(rule: str, labels: dict, same_as: tuple) -> None:
    assert fingerprint(rule, labels) == fingerprint(*same_as)
    assert fingerprint(rule, labels) != fingerprint(rule, {**labels, "c": "3"})
    assert len(fingerprint(rule, labels)) == 16


def _unbounded_strings(t, path: str, seen: set) -> list[str]:
    from msgspec import inspect as mi

    if isinstance(t, mi.StructType):
        if t.cls in seen:
            return []
        seen.add(t.cls)
        return [p for f in t.fields for p in _unbounded_strings(f.type, f"{t.cls.__name__}.{f.name}", seen)]
    if isinstance(t, mi.StrType):
        return [path] if t.max_length is None and t.pattern is None else []
    if isinstance(t, mi.ListType | mi.TupleType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        items = t.item_types if isinstance(t, mi.TupleType) else (t.item_type,)
        return [p for x in items for p in _unbounded_strings(x, path + "[]", seen)]
    if isinstance(t, mi.DictType):
        return _unbounded_strings(t.key_type, path + "{key}", seen) + _unbounded_strings(t.value_type, path, seen)
    if isinstance(t, mi.UnionType):
        return [p for x in t.types for p in _unbounded_strings(x, path, seen)]
    if isinstance(t, mi.Metadata):
        return _unbounded_strings(t.type, path, seen)
    return []


def test_every_string_of_the_contract_is_bounded() -> None:
    # a 900 KB priority_class was decided (issue 16): every string a message carries has a maximum
    from msgspec import inspect as mi

    from gpuaware.schemas.registry import MESSAGES, REQUESTS

    seen: set = set()
    types = [*MESSAGES.values(), *(t for pair in REQUESTS.values() for t in pair)]
    unbounded = [p for t in types for p in _unbounded_strings(mi.type_info(t), t.__name__, seen)]
    assert unbounded == []
