"""The provisioning job's settings, read once from ``GPUAWARE_PROVISION_*`` (``NATS_URL``, ``NATS_USER``,
``NATS_PASSWORD`` and ``DATABASE_URL``, the owner's DSN, as fallbacks), and the login passwords."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from gpuaware.runtime import ServiceSettings
from gpuaware.schemas import PROCESSES


class ProvisionSettings(ServiceSettings, frozen=True, kw_only=True):
    prefix: ClassVar[str] = "GPUAWARE_PROVISION_"

    service_name: str = "provision"
    streams: bool = True
    """create or update the platform's JetStream streams (as the NATS user, ``admin``)"""
    timeout_s: float = 30.0
    """how long to wait for NATS to answer (a bundled server may still be starting)"""


def login_passwords(env: Mapping[str, str]) -> dict[str, str]:
    """process name -> the password of its login role, for each process whose variable is set."""
    return {p.name: env[p.secret_variable] for p in PROCESSES
            if p.secret_variable is not None and env.get(p.secret_variable)}
