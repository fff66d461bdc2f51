-- The recorder service's group role: it writes the scheduling loop's audit trail (`placement_events`,
-- migration 0009) from its durable consumers of the BINDER and PLACEMENT streams, and nothing else.
--
-- Why these grants:
-- * INSERT on placement_events only: its writes are COPY into a session-temporary staging table (the
--   TEMPORARY right every role has on the database by default) and INSERT ... ON CONFLICT DO NOTHING
--   without a conflict target, which needs no SELECT; it never updates or deletes a row.
-- * the telemetry collector loses the rights 0009 gave it on placement_events: it never writes them,
--   and the demo's in-process writer that did is gone (the recorder is the one writer).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'gpuaware_recorder') THEN
        BEGIN
            CREATE ROLE gpuaware_recorder NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created by a concurrent migration in another database: the goal is met
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'cannot create role gpuaware_recorder: the migrating user needs CREATEROLE, or create it beforehand';
        END;
    END IF;
END
$$;

GRANT INSERT ON placement_events TO gpuaware_recorder;
REVOKE SELECT, INSERT ON placement_events FROM gpuaware_collector;
