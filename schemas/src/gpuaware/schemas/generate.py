"""Write the contract for tools in other languages: JSON Schema per message, one AsyncAPI 3.0.0 file.

    python -m gpuaware.schemas.generate schemas/generated      (``make schemas``)

writes ``jsonschema/<kind>.json`` for every message (``<kind>`` is the message's tag: the subject
for events, ``<endpoint>.request`` / ``<endpoint>.reply`` for request/reply) and ``asyncapi.yaml``.
The Structs are the source of truth; these files are derived and committed so reviewers see the
wire-level effect of a change, and a test fails when they are stale.

Design notes:

* Output is deterministic (sorted keys and names, no timestamps) so byte-for-byte comparison works.
* The AsyncAPI document describes the platform as one application: it *sends* every event and
  *receives* requests on ``quota.admit`` / ``placement.explain``, replying on the requester's inbox
  (a reply channel with ``address: null``). Payloads ``$ref`` shared ``components.schemas`` built
  by msgspec in one pass, so nested types (``PodPending`` inside ``AdmitRequest``) appear once.
  Every schema stays within draft-07 (AsyncAPI's default schema format) and is also valid 2020-12.
* YAML is written by a small emitter here, because the schemas package depends on msgspec and the
  standard library only; strings that are not plainly safe are double-quoted JSON strings, which
  YAML reads identically.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import msgspec

from gpuaware.schemas.registry import MESSAGES, REQUESTS
from gpuaware.schemas.streams import STREAMS, stream_for

__all__ = ["main", "render", "to_yaml", "write"]

ASYNCAPI_VERSION = "3.0.0"
#: version of the contract document; bump the minor on additive changes, the major on a new vN
CONTRACT_VERSION = "1.0.0"
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
REF_TEMPLATE = "#/components/schemas/{name}"
NOTICE = "generated from gpuaware.schemas by `make schemas`; do not edit"


def _tag(cls: type[msgspec.Struct]) -> str:
    return str(cls.__struct_config__.tag)


def _summary(cls: type) -> str:
    doc = (cls.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else cls.__name__


def _message_types() -> list[type[msgspec.Struct]]:
    types: list[type[msgspec.Struct]] = list(MESSAGES.values())
    for request, reply in REQUESTS.values():
        types += [request, reply]
    return sorted(types, key=_tag)


def json_schemas() -> dict[str, dict[str, Any]]:
    """``<kind>`` -> a self-contained JSON Schema (2020-12) of that message."""
    out = {}
    for cls in _message_types():
        schema = msgspec.json.schema(cls)
        out[_tag(cls)] = {"$schema": JSON_SCHEMA_DIALECT, "$comment": NOTICE, "title": _tag(cls), **schema}
    return out


def _message(cls: type[msgspec.Struct]) -> dict[str, Any]:
    return {
        "name": cls.__name__,
        "title": cls.__name__,
        "summary": _summary(cls),
        "contentType": "application/json",
        "payload": {"$ref": REF_TEMPLATE.format(name=cls.__name__)},
        "x-kind": _tag(cls),
    }


def _ref(*parts: str) -> dict[str, str]:
    return {"$ref": "#/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)}


def asyncapi() -> dict[str, Any]:
    """The AsyncAPI 3.0.0 document as plain data."""
    types = _message_types()
    _, components = msgspec.json.schema_components(types, ref_template=REF_TEMPLATE)
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}

    for subject in sorted(MESSAGES):
        cls = MESSAGES[subject]
        stream = stream_for(subject)
        channels[subject] = {
            "address": subject,
            "title": cls.__name__,
            "description": (
                f"{_summary(cls)} Publishers may append routing tokens after the version "
                f"(`{subject}.<cluster>...`); subscribe to `{subject}.>` to receive those."
            ),
            "messages": {cls.__name__: _ref("components", "messages", cls.__name__)},
            "x-jetstream-stream": stream.name if stream else None,
        }
        operations[f"send{cls.__name__}"] = {
            "action": "send",
            "channel": _ref("channels", subject),
            "summary": _summary(cls),
            "messages": [_ref("channels", subject, "messages", cls.__name__)],
        }

    for endpoint in sorted(REQUESTS):
        request, reply = REQUESTS[endpoint]
        reply_channel = f"{endpoint}.reply"
        channels[endpoint] = {
            "address": endpoint,
            "title": request.__name__,
            "description": f"NATS micro endpoint: {_summary(request)}",
            "messages": {request.__name__: _ref("components", "messages", request.__name__)},
        }
        channels[reply_channel] = {
            "address": None,
            "title": reply.__name__,
            "description": f"the requester's inbox, where `{endpoint}` answers (NATS reply subject)",
            "messages": {reply.__name__: _ref("components", "messages", reply.__name__)},
        }
        operations[f"receive{request.__name__}"] = {
            "action": "receive",
            "channel": _ref("channels", endpoint),
            "summary": f"answer `{endpoint}`",
            "messages": [_ref("channels", endpoint, "messages", request.__name__)],
            "reply": {
                "channel": _ref("channels", reply_channel),
                "messages": [_ref("channels", reply_channel, "messages", reply.__name__)],
            },
        }

    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": "gpuaware",
            "version": CONTRACT_VERSION,
            "description": (
                "Events, requests and replies of the gpuaware GPU-aware scheduling platform. "
                "Every message is JSON with a `kind` tag; events are tagged with their subject. "
                + NOTICE
            ),
        },
        "defaultContentType": "application/json",
        "servers": {
            "embedded": {
                "host": "127.0.0.1:4222",
                "protocol": "nats",
                "description": "the embedded nats-server started by `gpuaware up`",
            }
        },
        "channels": channels,
        "operations": dict(sorted(operations.items())),
        "components": {
            "messages": {cls.__name__: _message(cls) for cls in sorted(types, key=lambda c: c.__name__)},
            "schemas": dict(sorted(components.items())),
        },
        "x-jetstream-streams": [msgspec.to_builtins(s) for s in STREAMS],
    }


# --- a minimal, deterministic YAML emitter --------------------------------------------------------
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
_RESERVED = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"}


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:  # YAML 1.1 readers need a dot
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"
        return text
    if isinstance(value, str):
        if _PLAIN.match(value) and value.lower() not in _RESERVED:
            return value
        return json.dumps(value, ensure_ascii=True)
    raise TypeError(f"cannot write {type(value).__name__} as YAML")


def _lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict | list | tuple) and item:
                out.append(f"{pad}{_scalar(key)}:")
                out += _lines(item, indent + 2)
            else:
                out.append(f"{pad}{_scalar(key)}: {_flow(item)}")
    else:
        for item in value:
            if isinstance(item, dict | list | tuple) and item:
                sub = _lines(item, indent + 2)
                sub[0] = f"{pad}- {sub[0][indent + 2 :]}"
                out += sub
            else:
                out.append(f"{pad}- {_flow(item)}")
    return out


def _flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list | tuple):
        return "[]"
    return _scalar(value)


def to_yaml(document: dict[str, Any]) -> str:
    return "\n".join([f"# {NOTICE}", *_lines(document, 0)]) + "\n"


# --- files ---------------------------------------------------------------------------------------
def render() -> dict[str, str]:
    """Relative path -> file content, for everything ``write`` produces."""
    files = {
        f"jsonschema/{kind}.json": json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        for kind, schema in json_schemas().items()
    }
    files["asyncapi.yaml"] = to_yaml(asyncapi())
    return dict(sorted(files.items()))


def write(out_dir: Path) -> list[Path]:
    """Write every file under ``out_dir``, deleting generated files that no longer have a message."""
    files = render()
    (out_dir / "jsonschema").mkdir(parents=True, exist_ok=True)
    for stale in (out_dir / "jsonschema").glob("*.json"):
        if f"jsonschema/{stale.name}" not in files:
            stale.unlink()
    written = []
    for rel, text in files.items():
        path = out_dir / rel
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m gpuaware.schemas.generate OUT_DIR", file=sys.stderr)
        return 2
    written = write(Path(args[0]))
    print(f"wrote {len(written)} files under {args[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
