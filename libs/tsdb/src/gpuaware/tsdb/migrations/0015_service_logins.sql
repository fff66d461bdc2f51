-- Services connect as their own LOGIN roles (members of the group roles below, created by the
-- provisioning with `gpuaware.tsdb.ensure_login_roles`), never as the owner, and never migrate: at
-- start each checks that no migration is pending (`migrate_or_check`), which needs to read
-- schema_migrations (created by the migrator before the first migration).
GRANT SELECT ON schema_migrations TO gpuaware_reader, gpuaware_collector, gpuaware_health, gpuaware_quota,
    gpuaware_forecasting, gpuaware_recorder;
