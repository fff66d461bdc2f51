"""gpuaware.tsdb: metric history in PostgreSQL, with TimescaleDB where the extension exists.

The only package allowed to import psycopg; import what you need from here, not from its modules.
It owns the schema (versioned SQL migrations shipped in `migrations/`), connection pools, idempotent
COPY writers, readers, rollups and retention. Every call that touches the database is a coroutine
taking an asyncio connection (`Connection`). Whether the database has TimescaleDB is decided once,
at migration time; afterwards every call and every table/view name (`gpu_samples`, `gpu_metrics_1m`,
`gpu_metrics_1h`, ...) is the same either way:

* TimescaleDB: hypertable with compression and retention policies, continuous aggregates.
* native PostgreSQL: daily range partitions (made ahead by `maintain_partitions`, which also applies
  retention) and rollup tables refreshed incrementally by `refresh_rollups`.

Typical service use::

    pool = await open_service_pool(dsn, service="gpuaware-collector", env="COLLECTOR_DATABASE_URL",
                                   max_size=4, timeout=10.0)   # migrates first; safe when services race
    async with pool.connection() as conn:
        await write_sample_columns(conn, SampleColumns(...))   # redelivered samples insert nothing

A script: `asyncio.run(migrate(dsn))`, then `async with await connect(dsn) as conn: ...`.
"""

from gpuaware.tsdb.binary import SampleColumns, encode_copy_binary, encode_sample_columns, timestamp_micros
from gpuaware.tsdb.capabilities import Backend, choose_backend, installed_backend, timescaledb_available
from gpuaware.tsdb.errors import ChecksumMismatchError, MigrationError, TsdbError, is_data_error, is_transient
from gpuaware.tsdb.events import (
    LOOP_EVENTS,
    PLACEMENT_EVENT_COLUMNS,
    PlacementEvent,
    count_placement_events,
    placement_event,
    pod_history,
    write_placement_events,
)
from gpuaware.tsdb.health import (
    HEALTH_RETENTION,
    HealthAlertRow,
    HealthCheckpoint,
    HealthOverrideRow,
    HealthScoreRow,
    HealthTrackRow,
    expire_health,
    health_alerts,
    health_overrides,
    health_scores,
    load_health_state,
    save_health_checkpoint,
)
from gpuaware.tsdb.inventory import fetch_roundtrip, list_inventory, store_roundtrip, upsert_inventory
from gpuaware.tsdb.migrator import Migration, applied_migrations, load_migrations, migrate, pending_migrations
from gpuaware.tsdb.partitions import (
    RAW_RETENTION,
    Partition,
    PartitionReport,
    ensure_partitions,
    list_partitions,
    maintain_partitions,
)
from gpuaware.tsdb.pool import Connection, ConnectionPool, connect, conninfo, open_pool
from gpuaware.tsdb.readers import latest_samples, rollup_range, utilisation_range
from gpuaware.tsdb.roles import SchemaNotReadyError, ensure_login_roles, login_url, migrate_or_check
from gpuaware.tsdb.rollups import (
    ROLLUP_1H_RETENTION,
    ROLLUP_1M_RETENTION,
    ROLLUP_VIEWS,
    expire_rollups,
    refresh_rollups,
    refresh_statements,
)
from gpuaware.tsdb.rows import (
    POD_USAGE_COLUMNS,
    ROLLUP_COLUMNS,
    SAMPLE_COLUMNS,
    SAMPLE_PG_TYPES,
    InventoryGpu,
    PodUsage,
    Rollup,
    Sample,
    WindowRollup,
)
from gpuaware.tsdb.startup import open_service_pool
from gpuaware.tsdb.usage import POD_USAGE_RETENTION, expire_pod_usage, window_rollups, write_pod_usage
from gpuaware.tsdb.writer import copy_binary, copy_rows, write_sample_columns, write_samples

__all__ = [
    "HEALTH_RETENTION",
    "LOOP_EVENTS",
    "PLACEMENT_EVENT_COLUMNS",
    "POD_USAGE_COLUMNS",
    "POD_USAGE_RETENTION",
    "RAW_RETENTION",
    "ROLLUP_1H_RETENTION",
    "ROLLUP_1M_RETENTION",
    "ROLLUP_COLUMNS",
    "ROLLUP_VIEWS",
    "SAMPLE_COLUMNS",
    "SAMPLE_PG_TYPES",
    "Backend",
    "ChecksumMismatchError",
    "Connection",
    "ConnectionPool",
    "HealthAlertRow",
    "HealthCheckpoint",
    "HealthOverrideRow",
    "HealthScoreRow",
    "HealthTrackRow",
    "InventoryGpu",
    "Migration",
    "MigrationError",
    "Partition",
    "PartitionReport",
    "PlacementEvent",
    "PodUsage",
    "Rollup",
    "Sample",
    "SampleColumns",
    "SchemaNotReadyError",
    "TsdbError",
    "WindowRollup",
    "applied_migrations",
    "choose_backend",
    "connect",
    "conninfo",
    "copy_binary",
    "copy_rows",
    "count_placement_events",
    "encode_copy_binary",
    "encode_sample_columns",
    "ensure_login_roles",
    "ensure_partitions",
    "expire_health",
    "expire_pod_usage",
    "expire_rollups",
    "fetch_roundtrip",
    "health_alerts",
    "health_overrides",
    "health_scores",
    "installed_backend",
    "is_data_error",
    "is_transient",
    "latest_samples",
    "list_inventory",
    "list_partitions",
    "load_health_state",
    "load_migrations",
    "login_url",
    "maintain_partitions",
    "migrate",
    "migrate_or_check",
    "open_pool",
    "open_service_pool",
    "pending_migrations",
    "placement_event",
    "pod_history",
    "refresh_rollups",
    "refresh_statements",
    "rollup_range",
    "save_health_checkpoint",
    "store_roundtrip",
    "timescaledb_available",
    "timestamp_micros",
    "upsert_inventory",
    "utilisation_range",
    "window_rollups",
    "write_placement_events",
    "write_pod_usage",
    "write_sample_columns",
    "write_samples",
]
