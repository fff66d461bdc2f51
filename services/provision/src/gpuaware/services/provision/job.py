"""The provisioning steps, in order: streams (NATS, as admin), migrations, login roles (PostgreSQL, as
the owner). Each step is idempotent, so the Job may run again after a partial failure."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuaware import tsdb
from gpuaware.runtime import provision_streams
from gpuaware.schemas import login_roles
from gpuaware.services.provision.settings import ProvisionSettings

log = logging.getLogger(__name__)


@dataclass
class Provisioned:
    """What one run did (printed as its summary)."""

    streams: list[str] = field(default_factory=list)
    database: bool = False
    """a database was provisioned (migrations, logins)"""
    migrations: list[str] = field(default_factory=list)
    logins_created: list[str] = field(default_factory=list)
    logins_updated: list[str] = field(default_factory=list)

    def summary(self) -> str:
        streams = f"streams: {', '.join(self.streams) or 'not provisioned'}"
        if not self.database:
            return f"{streams}; database: not provisioned (no DATABASE_URL)"
        return (f"{streams}; migrations applied: {', '.join(self.migrations) or 'none pending'}; "
                f"login roles created: {', '.join(self.logins_created) or 'none'}; "
                f"updated: {', '.join(self.logins_updated) or 'none'}")


async def provision(settings: ProvisionSettings, passwords: Mapping[str, str]) -> Provisioned:
    """Streams when ``settings.streams``; with a database, the migrations, then a login role for each
    process of ``passwords`` (process name -> password). Refuses passwords without a database: the
    logins they name could not exist."""
    done = Provisioned()
    if passwords and not settings.database_url:
        raise ValueError(f"login passwords given for {', '.join(sorted(passwords))} but no database: set "
                         "DATABASE_URL (the owner's DSN)")
    if settings.streams:
        done.streams = await provision_streams(settings.nats_url, user=settings.nats_user,
                                               password=settings.nats_password, tls_ca=settings.nats_tls_ca,
                                               timeout=settings.timeout_s)
    if settings.database_url:
        done.database = True
        done.migrations = await tsdb.migrate(settings.database_url)
        logins = login_roles(passwords)
        done.logins_created = await tsdb.ensure_login_roles(settings.database_url, logins)
        done.logins_updated = sorted(set(logins) - set(done.logins_created))
    return done
