"""The committed JSON Schema / AsyncAPI files are current, well-formed, and describe the real wire."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest
import yaml

from gpuaware.schemas import MESSAGES, REQUESTS
from gpuaware.schemas.generate import asyncapi, main, to_yaml, write

REPO = Path(__file__).resolve().parents[2]
GENERATED = REPO / "schemas" / "generated"
ALL_TYPES = [*MESSAGES.values(), *(t for pair in REQUESTS.values() for t in pair)]
IDS = [t.__name__ for t in ALL_TYPES]


def _wire(msg: msgspec.Struct) -> Any:
    """What a non-Python reader sees: the JSON bytes parsed as plain JSON."""
    return json.loads(msgspec.json.encode(msg))


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return yaml.safe_load((GENERATED / "asyncapi.yaml").read_text())


def test_generated_files_are_up_to_date(tmp_path: Path) -> None:
    write(tmp_path)
    fresh, committed = _tree(tmp_path), _tree(GENERATED)
    stale = sorted(k for k in fresh.keys() | committed.keys() if fresh.get(k) != committed.get(k))
    assert not stale, f"schemas/generated is stale ({', '.join(stale)}): run make schemas"


def test_generation_is_deterministic(tmp_path: Path) -> None:
    write(tmp_path / "a")
    write(tmp_path / "b")
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")


def test_cli_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage" in capsys.readouterr().err


def test_yaml_emitter_round_trips() -> None:
    data = asyncapi()
    assert yaml.safe_load(to_yaml(data)) == json.loads(json.dumps(data))
    tricky = {"k": ["yes", "no", "1.0", "", "a: b", "#c", "x\ny", "é", None, True, 1.5e-300, 10**20, [], {}]}
    assert yaml.safe_load(to_yaml(tricky)) == tricky


def _resolve(doc: dict, ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = doc
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def test_asyncapi_structure(doc: dict) -> None:
    assert doc["asyncapi"] == "3.0.0"
    assert doc["info"]["title"] and doc["info"]["version"]
    assert set(MESSAGES) | set(REQUESTS) <= {c["address"] for c in doc["channels"].values()}
    for name, channel in doc["channels"].items():
        assert channel["messages"], f"channel {name} has no message"
        for ref in channel["messages"].values():
            assert "payload" in _resolve(doc, ref["$ref"])
    for name, op in doc["operations"].items():
        assert op["action"] in ("send", "receive")
        channel = _resolve(doc, op["channel"]["$ref"])
        for ref in op["messages"]:  # an operation's messages must be its channel's
            assert ref["$ref"].startswith(op["channel"]["$ref"] + "/messages/"), name
            _resolve(doc, ref["$ref"])
        is_endpoint = channel["address"] in REQUESTS
        assert ("reply" in op) is is_endpoint, name
        if is_endpoint:
            assert op["action"] == "receive"
            reply_channel = _resolve(doc, op["reply"]["channel"]["$ref"])
            assert reply_channel["address"] is None  # the requester's inbox


def test_asyncapi_schemas_are_valid_json_schema(doc: dict) -> None:
    for name, schema in doc["components"]["schemas"].items():
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.Draft7Validator.check_schema(schema)  # AsyncAPI's default schema format
        assert "prefixItems" not in json.dumps(schema), name


@pytest.mark.parametrize("cls", ALL_TYPES, ids=IDS)
def test_published_schemas_accept_the_wire_format(cls: type, doc: dict, samples: dict) -> None:
    instance = _wire(samples[cls])
    message = doc["components"]["messages"][cls.__name__]
    root = {"components": doc["components"], **message["payload"]}
    jsonschema.Draft202012Validator(root).validate(instance)

    tag = cls.__struct_config__.tag
    file_schema = json.loads((GENERATED / "jsonschema" / f"{tag}.json").read_text())
    jsonschema.Draft202012Validator.check_schema(file_schema)
    jsonschema.Draft202012Validator(file_schema).validate(instance)


@pytest.mark.parametrize(
    "cls, field, bad",
    [
        (MESSAGES["binder.pod.pending.v1"], "gpu_milli", 1500),
        (MESSAGES["telemetry.gpu.sampled.v1"], "util_pct", [120.0, 1.0, 1.0, 1.0]),
    ],
)
def test_published_schemas_carry_the_constraints(cls: type, field: str, bad: Any, samples: dict) -> None:
    instance = {**_wire(samples[cls]), field: bad}
    schema = json.loads((GENERATED / "jsonschema" / f"{cls.__struct_config__.tag}.json").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(instance)
