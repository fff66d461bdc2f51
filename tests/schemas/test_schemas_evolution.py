"""Round trips, schema evolution (old readers / new readers) and tag-based union decoding."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest

from gpuaware.schemas import (
    GPU_SAMPLED,
    MESSAGES,
    POD_PENDING,
    REQUESTS,
    AnyEvent,
    GpuSampled,
    PodBound,
    PodPending,
    TopologyPreference,
    decode_event,
)

ALL_TYPES = [*MESSAGES.values(), *(t for pair in REQUESTS.values() for t in pair)]
IDS = [t.__name__ for t in ALL_TYPES]

# fields a message cannot be valid without, although they have defaults (exactly-one-of rules)
KEEP_ON_OLD = {"ExplainRequest": {"pod_uid"}}


def _old_version(cls: type[msgspec.Struct]) -> type[msgspec.Struct]:
    """The message as an older release knew it: only the required fields (every default is 'new')."""
    keep = KEEP_ON_OLD.get(cls.__name__, set())
    fields = [(f.name, f.type) for f in msgspec.structs.fields(cls) if f.required or f.name in keep]
    return msgspec.defstruct(f"Old{cls.__name__}", fields, frozen=True, kw_only=True, tag_field="kind",
                             tag=cls.__struct_config__.tag)


def _known(cls: type[msgspec.Struct], msg: msgspec.Struct) -> dict[str, Any]:
    return {f: getattr(msg, f) for f in cls.__struct_fields__}


@pytest.mark.parametrize("cls", ALL_TYPES, ids=IDS)
def test_round_trip_json_and_msgpack(cls: type, samples: dict) -> None:
    msg = samples[cls]
    assert msgspec.json.decode(msgspec.json.encode(msg), type=cls) == msg
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(msg), type=cls) == msg


@pytest.mark.parametrize("cls", ALL_TYPES, ids=IDS)
def test_old_reader_decodes_new_message(cls: type, samples: dict) -> None:
    old = _old_version(cls)
    decoded = msgspec.json.decode(msgspec.json.encode(samples[cls]), type=old)
    assert _known(old, decoded) == _known(old, samples[cls])


@pytest.mark.parametrize("cls", ALL_TYPES, ids=IDS)
def test_new_reader_fills_defaults_of_old_message(cls: type, samples: dict) -> None:
    old = _old_version(cls)
    old_msg = old(**_known(old, samples[cls]))
    decoded = msgspec.json.decode(msgspec.json.encode(old_msg), type=cls)
    for field in msgspec.structs.fields(cls):
        if field.name in old.__struct_fields__:
            assert getattr(decoded, field.name) == getattr(old_msg, field.name)
        else:
            default = field.default_factory() if field.default is msgspec.NODEFAULT else field.default
            assert getattr(decoded, field.name) == default, field.name


# Hand-written old readers, as a service pinned to an earlier release would define them.
class OldPodPending(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag=POD_PENDING):
    source: str
    emitted_at: float
    pod_uid: str
    pod_name: str
    namespace: str
    submitted_at: float
    num_gpu: int = 0
    gpu_milli: int = 1000
    # no cluster, topology, expected_duration_s, attempt: added "later"


class OldGpuSampled(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag=GPU_SAMPLED):
    source: str
    emitted_at: float
    node: str
    sampled_at: float
    interval_s: float
    gpu_uuid: tuple[str, ...]
    gpu_index: tuple[int, ...]
    util_pct: tuple[float | None, ...] = ()
    # no tensor_active_pct column yet


def test_old_pod_reader_ignores_new_fields(samples: dict) -> None:
    new = msgspec.structs.replace(samples[PodPending], attempt=3, expected_duration_s=60.0)
    old = msgspec.json.decode(msgspec.json.encode(new), type=OldPodPending)
    assert (old.pod_uid, old.num_gpu, old.gpu_milli) == ("uid-1", 1, 500)


def test_new_pod_reader_fills_defaults() -> None:
    old = OldPodPending(source="binder/0", emitted_at=1.0, pod_uid="u", pod_name="p", namespace="n",
                        submitted_at=1.0, num_gpu=2)
    new = msgspec.json.decode(msgspec.json.encode(old), type=PodPending)
    # new fields take their defaults; 2 whole GPUs -> 2000 thousandths for quota
    assert (new.attempt, new.expected_duration_s, new.cluster) == (0, None, "default")
    assert new.topology is TopologyPreference.NONE
    assert new.gpu_milli_total == 2000


def test_telemetry_column_added_later(samples: dict) -> None:
    new = msgspec.structs.replace(samples[GpuSampled], tensor_active_pct=(10.0, 20.0, None, 40.0))
    old = msgspec.json.decode(msgspec.json.encode(new), type=OldGpuSampled)
    assert old.util_pct == new.util_pct

    old_msg = OldGpuSampled(source="agent", emitted_at=1.0, node="n", sampled_at=1.0, interval_s=10.0,
                            gpu_uuid=("GPU-0",), gpu_index=(0,), util_pct=(5.0,))
    decoded = msgspec.json.decode(msgspec.json.encode(old_msg), type=GpuSampled)
    assert decoded.tensor_active_pct == ()
    [row] = decoded.rows()
    assert (row.util_pct, row.tensor_active_pct) == (5.0, None)


@pytest.mark.parametrize("cls", list(MESSAGES.values()), ids=[t.__name__ for t in MESSAGES.values()])
def test_union_decoding_dispatches_on_kind(cls: type, samples: dict) -> None:
    data = msgspec.json.encode(samples[cls])
    decoded = decode_event(data)
    assert type(decoded) is cls and decoded == samples[cls]
    assert type(msgspec.json.decode(data, type=AnyEvent)) is cls


@pytest.mark.parametrize(
    "payload, error",
    [
        ({"kind": "telemetry.gpu.sampled.v9"}, "Invalid value 'telemetry.gpu.sampled.v9' - at `$.kind`"),
        ({"source": "x", "emitted_at": 1.0}, "missing required field `kind`"),
        ({"kind": "quota.admit.request"}, "Invalid value 'quota.admit.request'"),  # a request is no event
    ],
)
def test_union_rejects_unknown_or_missing_kind(payload: dict, error: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=re.escape(error)):
        decode_event(msgspec.json.encode(payload))


def test_tag_guards_against_the_wrong_struct_on_a_subject(samples: dict) -> None:
    # a PodBound published on the pending subject does not decode as a PodPending
    with pytest.raises(msgspec.ValidationError, match=re.escape("binder.pod.bound.v1")):
        msgspec.json.decode(msgspec.json.encode(samples[PodBound]), type=PodPending)
