"""gpuaware.tsdb: metric history in PostgreSQL, with TimescaleDB where the extension exists.

The only package allowed to import psycopg. It owns the schema (versioned SQL migrations shipped in
`migrations/`), connection pools, idempotent COPY writers, readers, rollups and retention. Whether
the database has TimescaleDB is decided once, at migration time; afterwards every call and every
table/view name (`gpu_samples`, `gpu_metrics_1m`, `gpu_metrics_1h`, ...) is the same either way:

* TimescaleDB: hypertable with compression and retention policies, continuous aggregates.
* native PostgreSQL: daily range partitions (made ahead by `maintain_partitions`, which also applies
  retention) and rollup tables refreshed incrementally by `refresh_rollups`.

Typical service use::

    migrate(dsn)                                   # at start-up; safe when several services race
    pool = open_pool(dsn, application_name="gpuaware-collector")
    with pool.connection() as conn:
        write_samples(conn, samples)               # redelivered samples insert nothing
    write_sample_columns(conn, SampleColumns(...))   # the same, columnar: one numpy-built binary COPY
"""

from gpuaware.tsdb.binary import SampleColumns, encode_copy_binary, encode_sample_columns, timestamp_micros
from gpuaware.tsdb.capabilities import Backend, choose_backend, installed_backend, timescaledb_available
from gpuaware.tsdb.errors import ChecksumMismatchError, MigrationError, TsdbError, is_transient
from gpuaware.tsdb.health import (
    HEALTH_RETENTION,
    HealthAlertRow,
    HealthCheckpoint,
    HealthOverrideRow,
    HealthScoreRow,
    HealthTrackRow,
    expire_health_async,
    health_alerts_async,
    health_overrides_async,
    health_scores_async,
    load_health_state_async,
    save_health_checkpoint_async,
)
from gpuaware.tsdb.inventory import (
    fetch_roundtrip,
    fetch_roundtrip_async,
    list_inventory,
    list_inventory_async,
    store_roundtrip,
    store_roundtrip_async,
    upsert_inventory,
    upsert_inventory_async,
)
from gpuaware.tsdb.migrator import (
    Migration,
    applied_migrations,
    load_migrations,
    migrate,
    pending_migrations,
)
from gpuaware.tsdb.partitions import (
    RAW_RETENTION,
    Partition,
    PartitionReport,
    ensure_partitions,
    list_partitions,
    maintain_partitions,
    maintain_partitions_async,
)
from gpuaware.tsdb.pool import connect, conninfo, open_async_pool, open_pool, open_service_pool
from gpuaware.tsdb.readers import (
    latest_samples,
    latest_samples_async,
    rollup_range,
    rollup_range_async,
    utilisation_range_async,
)
from gpuaware.tsdb.rollups import (
    ROLLUP_1H_RETENTION,
    ROLLUP_1M_RETENTION,
    ROLLUP_VIEWS,
    expire_rollups,
    expire_rollups_async,
    refresh_rollups,
    refresh_rollups_async,
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
from gpuaware.tsdb.usage import (
    POD_USAGE_RETENTION,
    expire_pod_usage_async,
    window_rollups_async,
    write_pod_usage_async,
)
from gpuaware.tsdb.writer import (
    copy_binary,
    copy_binary_async,
    copy_rows,
    copy_rows_async,
    write_sample_columns,
    write_sample_columns_async,
    write_samples,
    write_samples_async,
)

__all__ = [
    "HEALTH_RETENTION",
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
    "PodUsage",
    "Rollup",
    "Sample",
    "SampleColumns",
    "TsdbError",
    "WindowRollup",
    "applied_migrations",
    "choose_backend",
    "connect",
    "conninfo",
    "copy_binary",
    "copy_binary_async",
    "copy_rows",
    "copy_rows_async",
    "encode_copy_binary",
    "encode_sample_columns",
    "ensure_partitions",
    "expire_health_async",
    "expire_pod_usage_async",
    "expire_rollups",
    "expire_rollups_async",
    "fetch_roundtrip",
    "fetch_roundtrip_async",
    "health_alerts_async",
    "health_overrides_async",
    "health_scores_async",
    "installed_backend",
    "is_transient",
    "latest_samples",
    "latest_samples_async",
    "list_inventory",
    "list_inventory_async",
    "list_partitions",
    "load_health_state_async",
    "load_migrations",
    "maintain_partitions",
    "maintain_partitions_async",
    "migrate",
    "open_async_pool",
    "open_pool",
    "open_service_pool",
    "pending_migrations",
    "refresh_rollups",
    "refresh_rollups_async",
    "refresh_statements",
    "rollup_range",
    "rollup_range_async",
    "save_health_checkpoint_async",
    "store_roundtrip",
    "store_roundtrip_async",
    "timescaledb_available",
    "timestamp_micros",
    "upsert_inventory",
    "upsert_inventory_async",
    "utilisation_range_async",
    "window_rollups_async",
    "write_pod_usage_async",
    "write_sample_columns",
    "write_sample_columns_async",
    "write_samples",
    "write_samples_async",
]
