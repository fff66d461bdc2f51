"""Header names the bus writes and one rule for their values.

NATS headers travel as `Name: value\\r\\n` lines, so a value must never contain CR/LF; error
texts (msgspec validation messages, exception reprs) are flattened and bounded here before they
become a header, otherwise one odd message could corrupt the protocol stream.
"""

from __future__ import annotations

from collections.abc import Mapping

#: JetStream de-duplicates messages carrying the same id within the stream's duplicate window.
MSG_ID = "Nats-Msg-Id"
#: request/reply error headers defined by the NATS micro protocol (ADR-32).
SERVICE_ERROR = "Nats-Service-Error"
SERVICE_ERROR_CODE = "Nats-Service-Error-Code"

MAX_HEADER_VALUE = 1024


def header_value(text: object, limit: int = MAX_HEADER_VALUE) -> str:
    """One line, at most `limit` characters: safe to put in a NATS header."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def copy_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    return dict(headers) if headers else {}
