"""Fuzzing (hypothesis), bounded for `make test`: every message decoder of the contract, the trace and
node-list loaders, and the CLI's numeric options take arbitrary input without a crash or a hang; every
refusal is the documented error, with a reason. `make fuzz` runs the same properties longer
(HYPOTHESIS_PROFILE=fuzz).

What "no crash" means here: a decoder raises only msgspec's DecodeError or ValidationError (the bus
dead-letters exactly those, with the message as the reason); a loader raises only TraceError (which
names the file and line); a numeric option is either a finite number in its range or a BadParameter
naming the option.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
import msgspec
import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaware.bus import Channel
from gpuaware.cli.options import bounded
from gpuaware.schemas.registry import MESSAGES, REQUESTS
from gpuaware.sim.traces import TraceError, load_nodes, load_pods

TYPES = sorted({*MESSAGES.values(), *(t for pair in REQUESTS.values() for t in pair)}, key=lambda t: t.__name__)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=20), inner, max_size=6),
    max_leaves=30)


def _fields(t: type) -> list[str]:
    return list(t.__struct_fields__)


@pytest.mark.parametrize("typ", TYPES, ids=lambda t: t.__name__)
@given(data=st.data())
def test_every_decoder_refuses_garbage_with_a_reason(typ: type, data: st.DataObject) -> None:
    channel = Channel("fuzz.subject.v1", typ)
    kind = typ.__struct_config__.tag
    choice = data.draw(st.sampled_from(["bytes", "json", "shaped"]))
    if choice == "bytes":
        payload = data.draw(st.binary(max_size=300))
    elif choice == "json":
        payload = json.dumps(data.draw(JSON)).encode()
    else:  # the right tag and field names, arbitrary values: deep validation paths
        names = _fields(typ)
        obj = {k: data.draw(JSON) for k in data.draw(st.lists(st.sampled_from(names), max_size=len(names)))}
        obj["kind"] = kind
        payload = json.dumps(obj).encode()
    try:
        msg = channel.decode_on("fuzz.subject.v1", payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        assert str(exc)  # the reason the dead letter carries
    else:
        assert isinstance(msg, typ)  # decoded: it satisfies the contract (constraints run at decode)


def _csv(columns: list[str], rows: list[list[str]]) -> str:
    return "\n".join([",".join(columns), *(",".join(r) for r in rows)]) + "\n"


CELL = st.one_of(st.text(alphabet=st.characters(blacklist_characters=",\n\r\x00", blacklist_categories=("Cs",)),
                         max_size=12),
                 st.integers(-5, 10**7).map(str), st.sampled_from(["nan", "inf", "-1", "1e309", "", "A100", "V100M16"]))


@given(columns=st.permutations(["sn", "cpu_milli", "memory_mib", "gpu", "model"]).map(list),
       rows=st.lists(st.lists(CELL, min_size=5, max_size=6), max_size=6), drop=st.booleans())
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_the_node_list_loader_takes_any_csv(tmp_path: Path, columns: list[str], rows: list[list[str]],
                                           drop: bool) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text(_csv(columns[:-1] if drop else columns, rows))
    try:
        nodes = load_nodes(path)
    except TraceError as exc:
        assert "nodes.csv" in str(exc)
    else:
        assert nodes and all(n.cpu_milli >= 0 and n.memory_mib >= 0 and n.num_gpu >= 0 for n in nodes)


POD_COLUMNS = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "creation_time",
               "deletion_time", "scheduled_time", "pod_phase"]


@given(rows=st.lists(st.lists(CELL, min_size=11, max_size=11), max_size=6))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_the_pod_list_loader_takes_any_csv(tmp_path: Path, rows: list[list[str]]) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(_csv(POD_COLUMNS, rows))
    try:
        pods = load_pods(path)
    except TraceError as exc:
        assert "pods.csv" in str(exc)
    else:
        for p in pods:
            r = p.request
            assert r.num_gpu >= 0 and 0 <= r.gpu_milli <= 1000 and r.cpu_milli >= 0


@given(raw=st.binary(max_size=400))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_the_loaders_take_any_bytes(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(raw)
    for load in (load_nodes, load_pods):
        try:
            load(path)
        except TraceError as exc:
            assert "trace.csv" in str(exc)


@given(value=st.floats(allow_nan=True, allow_infinity=True) | st.none(),
       lo=st.floats(-1e6, 1e6), span=st.floats(0, 1e6), lo_open=st.booleans())
def test_a_bounded_option_is_finite_and_in_range_or_refused_by_name(value: float | None, lo: float, span: float,
                                                                    lo_open: bool) -> None:
    hi = lo + span
    param = click.Option(["--x"])
    check = bounded(lo, hi, lo_open=lo_open)
    try:
        got = check(param, value)
    except typer.BadParameter as exc:
        assert "--x must be a finite number" in str(exc)
        assert value is not None
    else:
        assert got is None if value is None else (math.isfinite(got) and lo <= got <= hi and not (lo_open and got == lo))
