"""Structured logging: one JSON object per line, with secrets scrubbed before they reach a sink.

Log collectors (Loki, CloudWatch, ...) parse lines, not prose; humans at a terminal get the
`console` format instead. Any string that looks like a URL with a password is redacted, so a
stray `log.info("connecting to %s", dsn)` cannot leak credentials.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

_SECRET_URL = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]+:)[^@\s]+@", re.IGNORECASE)
_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def scrub(text: str) -> str:
    return _SECRET_URL.sub(r"\1***@", text)


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": scrub(record.getMessage()),
        }
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                entry[key] = scrub(value) if isinstance(value, str) else value
        if record.exc_info:
            entry["exc"] = scrub(self.formatException(record.exc_info))
        return json.dumps(entry, default=str)


class ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        text = f"{stamp} {record.levelname[0]} {record.name}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return scrub(text)


class _StandardError(logging.StreamHandler):
    """A handler on whatever ``sys.stderr`` is when a record is written, not the stream it was when logging
    was set up: a command run in-process (a test's CliRunner, a tool embedding the CLI) swaps standard
    error and closes its own afterwards, and a handler holding that closed stream turns every later log
    line into a 'Logging error' traceback."""

    @property  # read-only by design: the stream is always the current one
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def setup_logging(service: str, level: str = "INFO", fmt: str = "json") -> None:
    handler = _StandardError()
    handler.setFormatter(JsonFormatter(service) if fmt == "json" else ConsoleFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
