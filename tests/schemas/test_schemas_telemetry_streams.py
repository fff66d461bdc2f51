"""Telemetry batches stay compact and row/column views agree; the streams capture what they must."""

from __future__ import annotations

import msgspec
import pytest

from gpuaware.schemas import (
    DEADLETTER,
    MESSAGES,
    METRIC_COLUMNS,
    REQUESTS,
    STREAMS,
    TELEMETRY,
    GpuSample,
    GpuSampled,
    PodPending,
    StreamSpec,
    dead_letter_subject,
    stream_for,
    subject_matches,
    with_replicas,
)


def _batch(gpus: int) -> GpuSampled:
    rows = [
        GpuSample(gpu_uuid=f"GPU-{i:08x}-1111-2222-3333-444455556666", gpu_index=i, util_pct=87.5, mem_util_pct=40.0,
                  mem_used_mib=70000, mem_total_mib=81920, temperature_c=61.0, mem_temperature_c=70.0,
                  power_w=312.25, power_limit_w=400.0, sm_clock_mhz=1410, mem_clock_mhz=1593,
                  throttle_reasons=0, ecc_corrected_volatile=0, ecc_uncorrected_volatile=0,
                  ecc_corrected_aggregate=3, ecc_uncorrected_aggregate=0, retired_pages=0,
                  remapped_rows_correctable=0, remapped_rows_uncorrectable=0, row_remap_pending=False,
                  xid_last=0, pcie_replay=0, nvlink_up=12, tensor_active_pct=55.0)
        for i in range(gpus)
    ]
    return GpuSampled.from_samples(rows, source="agent/node-a", emitted_at=1.0, node="node-a",
                                   sampled_at=1.0, interval_s=10.0)


def test_row_view_and_columns_cannot_drift() -> None:
    # every GpuSample metric is a GpuSampled column, in the same order: 2 identity + 23 metrics = 25;
    # per-GPU columns that are not metrics (anomaly_flags, added later) come after them
    sampled_fields = GpuSampled.__struct_fields__
    start = sampled_fields.index("gpu_uuid")
    assert sampled_fields[start:start + 25] == ("gpu_uuid", "gpu_index", *METRIC_COLUMNS)
    assert sampled_fields[start + 25:] == ("anomaly_flags",)
    assert len(METRIC_COLUMNS) + 2 == 25


def test_from_samples_and_rows_round_trip() -> None:
    batch = _batch(3)
    again = GpuSampled.from_samples(batch.rows(), source="agent/node-a", emitted_at=1.0, node="node-a",
                                    sampled_at=1.0, interval_s=10.0)
    assert again == batch
    assert [r.gpu_index for r in batch.rows()] == [0, 1, 2]


def test_unreported_metric_becomes_empty_column() -> None:
    rows = [GpuSample(gpu_uuid="GPU-0", gpu_index=0, util_pct=1.0), GpuSample(gpu_uuid="GPU-1", gpu_index=1)]
    batch = GpuSampled.from_samples(rows, source="a", emitted_at=1.0, node="n", sampled_at=1.0, interval_s=1.0)
    assert batch.util_pct == (1.0, None)  # reported by one GPU: kept, None for the other
    assert batch.power_w == ()  # reported by none: not sent


def test_32_gpu_batch_is_compact() -> None:
    batch = _batch(32)
    data = msgspec.json.encode(batch)
    # each metric name is on the wire once, not once per GPU
    assert data.count(b'"util_pct"') == 1
    # the same content as a list of objects repeats 23 names x 32 GPUs
    as_objects = msgspec.json.encode([msgspec.to_builtins(r) for r in batch.rows()])
    assert len(data) < 0.4 * len(as_objects), (len(data), len(as_objects))  # ~4.9 KB vs ~18.7 KB
    assert len(data) < 8 * 1024
    assert len(msgspec.msgpack.encode(batch)) < 6 * 1024


# --- streams ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "pattern, subject, ok",
    [
        ("telemetry.>", "telemetry.gpu.sampled.v1", True),
        ("telemetry.>", "telemetry", False),  # `>` needs at least one token
        ("placement.pod.>", "placement.explain", False),
        ("quota.usage.>", "quota.usage.reported.v1.default", True),
        ("a.*.c", "a.b.c", True),
        ("a.*.c", "a.b.d", False),
        ("a.*", "a.b.c", False),
    ],
)
def test_subject_matches(pattern: str, subject: str, ok: bool) -> None:
    assert subject_matches(pattern, subject) is ok


@pytest.mark.parametrize("subject", sorted(MESSAGES))
def test_every_event_is_captured_by_exactly_one_stream(subject: str) -> None:
    for s in (subject, f"{subject}.default.node-a"):
        owners = [spec.name for spec in STREAMS if any(subject_matches(p, s) for p in spec.subjects)]
        assert len(owners) == 1, (s, owners)


@pytest.mark.parametrize("endpoint", sorted(REQUESTS))
def test_no_stream_captures_a_request_reply_endpoint(endpoint: str) -> None:
    # JetStream would answer the request with a PubAck before the service replies
    assert stream_for(endpoint) is None


def test_dead_letters_land_in_the_dead_letter_stream() -> None:
    for subject in MESSAGES:
        assert stream_for(dead_letter_subject(subject)) is DEADLETTER


def test_streams_are_well_formed() -> None:
    names = [s.name for s in STREAMS]
    assert len(set(names)) == len(names)
    assert TELEMETRY.max_age_s > 0 and TELEMETRY.max_bytes > 0  # bounded
    for spec in STREAMS:
        assert spec.storage == "file" and spec.duplicate_window_s > 0, spec.name
        msgspec.convert(msgspec.to_builtins(spec), StreamSpec)  # passes its own constraints
    assert {s.replicas for s in with_replicas(STREAMS, 3)} == {3}
    with pytest.raises(msgspec.ValidationError, match="retention"):
        msgspec.convert({**msgspec.to_builtins(TELEMETRY), "retention": "forever"}, StreamSpec)


def test_pod_pending_gpu_total() -> None:
    base = {"source": "b", "emitted_at": 1.0, "pod_uid": "u", "pod_name": "p", "namespace": "n", "submitted_at": 1.0}
    # one GPU at half -> 500; four whole GPUs -> 4 x 1000; CPU only -> 0
    assert PodPending(**base, num_gpu=1, gpu_milli=500).gpu_milli_total == 500
    assert PodPending(**base, num_gpu=4).gpu_milli_total == 4000
    assert PodPending(**base).gpu_milli_total == 0
