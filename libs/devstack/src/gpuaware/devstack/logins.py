"""The embedded stack's database logins: one password per process of the list that has a database role.

Why here: like the NATS users' passwords, they belong to one stack's data folder (drawn once, kept
owner-only in ``<data>/postgres-logins.json``, forgotten by ``stack_down``), so a second ``gpuaware up``
or demo run reuses them. Creating the roles is the owner's job (``gpuaware.tsdb.ensure_login_roles``,
through the provisioning); this module only keeps the secrets.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from gpuaware.devstack.errors import StackError
from gpuaware.devstack.nats import write_private
from gpuaware.schemas import PROCESSES

LOGINS = "postgres-logins.json"

__all__ = ["LOGINS", "database_passwords", "forget_database_passwords"]


def database_passwords(data_dir: Path) -> dict[str, str]:
    """process name -> the password of its login role, for every process with a database role (drawn
    the first time, the same ones afterwards)."""
    path = Path(data_dir) / LOGINS
    try:
        known = json.loads(path.read_text())
    except FileNotFoundError:
        known = {}
    except ValueError as exc:
        raise StackError(f"{path} is not JSON ({exc}): delete it to draw new passwords") from None
    wanted = {p.name: known.get(p.name) or secrets.token_urlsafe(24) for p in PROCESSES if p.database_role}
    if wanted != known:
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        write_private(path, json.dumps(wanted, indent=2) + "\n")
    return wanted


def forget_database_passwords(data_dir: Path) -> bool:
    """Delete the passwords (the roles stay in the database: the next stack draws new ones and the
    provisioning sets them)."""
    path = Path(data_dir) / LOGINS
    if path.exists():
        path.unlink()
        return True
    return False
