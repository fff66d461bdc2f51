"""One frozen settings object per service, read once from a prefixed environment.

Handlers never read `os.environ`; the entry point calls `Settings.from_env()` once and passes the
object down. Each service subclasses `ServiceSettings`, adds its own fields with defaults (each
documented where it is declared), and picks a prefix: `GPUAWARE_PLACEMENT_` reads
`GPUAWARE_PLACEMENT_LOG_LEVEL` and so on. The two URLs also fall back to the unprefixed
`NATS_URL` / `DATABASE_URL` that the launcher and the chart set for every service, and the NATS
user and password to `NATS_USER` / `NATS_PASSWORD` (one least-privilege user per service, see
`gpuaware.schemas.permissions`). Secrets never reach a log: `redacted()` masks them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar, Self

import msgspec


class SettingsError(ValueError):
    """A setting is missing or malformed; the message names the variable and what it should hold."""


class ServiceSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What every service needs; subclass to add service fields."""

    prefix: ClassVar[str] = "GPUAWARE_"

    service_name: str = "gpuaware"
    """Name announced to NATS micro ($SRV.INFO) and to OpenTelemetry."""
    instance_id: str = ""
    """Unique per process; empty means hostname + pid."""
    cluster: str = "default"
    """Cluster this instance serves; becomes part of subjects and leader-election keys."""
    nats_url: str = "nats://127.0.0.1:4222"
    """NATS server(s), comma-separated; the launcher's default port."""
    nats_creds: str = ""
    """Path to a NATS credentials file (per-service least-privilege user); empty = none."""
    nats_user: str = ""
    """NATS user (the service's identity in `gpuaware.schemas.permissions`); empty = no user/password."""
    nats_password: str = ""
    """Password of `nats_user`; never logged."""
    nats_tls_ca: str = ""
    """CA certificate (PEM file) to verify a TLS NATS server with (`tls://` URLs); empty = no TLS."""
    database_url: str = ""
    """libpq URL; empty for services that do not touch the database."""
    log_level: str = "INFO"
    log_format: str = "json"
    """`json` (one object per line, for collectors) or `console` (for humans)."""
    otel_exporter: str = "none"
    """`none`, `console`, `memory` (tests) or `otlp` (OTLP over HTTP to `OTEL_EXPORTER_OTLP_ENDPOINT`)."""
    drain_timeout_s: float = 10.0
    """How long a service drains in-flight work after SIGTERM before it exits anyway."""
    metrics_port: int = 0
    """Serve Prometheus metrics on this port (`/metrics`); 0 = off. The chart uses 9464."""
    metrics_addr: str = "127.0.0.1"
    """Address the metrics endpoint listens on (the chart: 0.0.0.0, for Prometheus in the cluster)."""
    profile_out: str = ""
    """Write a cProfile of the service while it serves (pstats format) to this file when it stops;
    empty = off. How the benchmarks find where the CPU goes (`bench/results/*_profile.txt`)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        env = os.environ if env is None else env
        raw: dict[str, Any] = {}
        for field in cls.__struct_fields__:
            key = f"{cls.prefix}{field.upper()}"
            if key in env:
                raw[field] = env[key]
        for field, fallback in (("nats_url", "NATS_URL"), ("database_url", "DATABASE_URL"),
                                ("nats_user", "NATS_USER"), ("nats_password", "NATS_PASSWORD"),
                                ("nats_tls_ca", "NATS_TLS_CA")):
            if field not in raw and fallback in env:
                raw[field] = env[fallback]
        try:
            return msgspec.convert(raw, cls, strict=False)
        except msgspec.ValidationError as exc:
            raise SettingsError(f"invalid setting ({cls.prefix}*): {exc}") from None

    def require_positive(self, *names: str) -> None:
        """Refuse (``SettingsError``) the first of these fields that is zero or negative, naming its variable."""
        for name in names:
            if getattr(self, name) <= 0:
                raise SettingsError(f"{self.prefix}{name.upper()} must be positive")

    def redacted(self) -> dict[str, Any]:
        """Settings safe to log: secrets (passwords, tokens) masked whole, passwords in URLs masked."""
        out = msgspec.structs.asdict(self)
        for key, value in out.items():
            if not isinstance(value, str):
                continue
            if any(word in key for word in _SECRET_FIELDS):
                out[key] = "***" if value else ""
            elif "url" in key or "creds" in key:
                out[key] = redact_url(value)
        return out


class DatabaseSettings(ServiceSettings, frozen=True, kw_only=True):
    """A service that keeps state in the database: its connection pool's size and patience."""

    pool_size: int = 2
    """database connections the service holds at most"""
    db_timeout_s: float = 5.0
    """how long a query waits for a pooled connection before it counts as failed"""

    @property
    def database_variable(self) -> str:
        """The prefixed variable that names this service's database (``DATABASE_URL`` the fallback)."""
        return f"{self.prefix}DATABASE_URL"


#: a setting whose name contains one of these holds a secret
_SECRET_FIELDS = ("password", "secret", "token")


def redact_url(value: str) -> str:
    """`postgresql://user:secret@host/db` -> `postgresql://user:***@host/db`."""
    if "://" not in value or "@" not in value:
        return value
    scheme, rest = value.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    if ":" in creds:
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return value
