-- Raw GPU samples, on either backend. The columns, key and indexes are the same on both, and so are
-- the maintenance functions' names and signatures, so callers (the writer, the collector's
-- maintenance loop, pg_cron) never branch on the backend. The functions are SECURITY DEFINER so a
-- collector role that may only INSERT can still get partitions made.
--
-- native: declarative range partitioning by day (UTC). Retention becomes DROP TABLE of a whole day
-- (no vacuum debt), and queries on a time window touch only the days they need. A DEFAULT partition
-- catches any row whose day has no partition yet, so a write never fails for lack of one;
-- maintenance later moves such rows into a proper partition. Partitions are named
-- gpu_samples_pYYYYMMDD and cover [day 00:00 UTC, next day).
--
-- TimescaleDB: a hypertable with 1-day chunks, compressed after 7 days (segmented by GPU, so one
-- GPU's history decompresses alone), dropped after 30 days by a background policy. Chunks appear on
-- demand, so "ensure" has nothing to do. Uses the create_hypertable/compression API that every
-- TimescaleDB 2.x has.
--@ timescale
CREATE EXTENSION IF NOT EXISTS timescaledb;
--@ end

CREATE TABLE gpu_samples (
    ts               timestamptz NOT NULL,
    node             text        NOT NULL,
    gpu_uuid         text        NOT NULL,
    util_pct         real,
    mem_util_pct     real,
    mem_used_mib     integer,
    mem_total_mib    integer,
    temperature_c    real,
    power_w          real,
    power_limit_w    real,
    sm_clock_mhz     integer,
    mem_clock_mhz    integer,
    throttle_reasons bigint,
    ecc_volatile     bigint,
    ecc_aggregate    bigint,
    retired_rows     integer,
    xid_last         integer,
    pcie_replay      bigint,
    nvlink_up        integer,
    PRIMARY KEY (gpu_uuid, ts)
--@ native
) PARTITION BY RANGE (ts);
--@ timescale
);
SELECT create_hypertable('gpu_samples', 'ts', chunk_time_interval => INTERVAL '1 day', if_not_exists => TRUE);
--@ end

CREATE INDEX gpu_samples_node_ts ON gpu_samples (node, ts DESC);

--@ native
-- samples arrive roughly in time order, so a BRIN index makes "everything since T" (rollup refresh)
-- cheap at a few pages per partition
CREATE INDEX gpu_samples_ts_brin ON gpu_samples USING brin (ts);

CREATE TABLE gpu_samples_default PARTITION OF gpu_samples DEFAULT;
--@ timescale
ALTER TABLE gpu_samples SET (
    timescaledb.compress,
    timescaledb.compress_segmentby = 'gpu_uuid',
    timescaledb.compress_orderby = 'ts DESC'
);
SELECT add_compression_policy('gpu_samples', compress_after => INTERVAL '7 days', if_not_exists => TRUE);
SELECT add_retention_policy('gpu_samples', drop_after => INTERVAL '30 days', if_not_exists => TRUE);
--@ end

GRANT SELECT ON gpu_samples TO gpuaware_reader;
GRANT INSERT ON gpu_samples TO gpuaware_collector;


-- Create the partitions for the given UTC days (NULLs and existing days are skipped); returns how
-- many were created. Rows already sitting in the default partition for such a day are moved in.
-- The new table is filled first and then ATTACHed, which locks the parent only in SHARE UPDATE
-- EXCLUSIVE mode (CREATE TABLE ... PARTITION OF would take ACCESS EXCLUSIVE and block readers).
-- TimescaleDB creates chunks on insert: nothing to ensure.
CREATE FUNCTION gpuaware_ensure_partitions(p_days date[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
--@ native
DECLARE
    d       date;
    part    text;
    lo      timestamptz;
    hi      timestamptz;
    created integer := 0;
BEGIN
    FOR d IN SELECT DISTINCT x FROM unnest(p_days) AS x WHERE x IS NOT NULL ORDER BY 1 LOOP
        part := 'gpu_samples_p' || to_char(d, 'YYYYMMDD');
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        -- Serialise creators with a self-conflicting lock on the parent alone (readers and INSERTs
        -- are not blocked), then re-check: another writer may have made it while we waited. A table
        -- lock, not an advisory lock, because taking it also refreshes this session's catalog cache;
        -- after an advisory lock to_regclass could still miss the table another session just made.
        LOCK TABLE ONLY gpu_samples IN SHARE UPDATE EXCLUSIVE MODE;
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        lo := d::timestamp AT TIME ZONE 'UTC';
        hi := (d + 1)::timestamp AT TIME ZONE 'UTC';
        EXECUTE format('CREATE TABLE %I (LIKE gpu_samples INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
        EXECUTE format('WITH moved AS (DELETE FROM gpu_samples_default WHERE ts >= %L AND ts < %L RETURNING *) '
                       'INSERT INTO %I SELECT * FROM moved', lo, hi, part);
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (ts >= %L AND ts < %L)',
                       part, part || '_range', lo, hi);  -- lets ATTACH skip its validation scan
        EXECUTE format('ALTER TABLE gpu_samples ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', part, lo, hi);
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', part, part || '_range');
        created := created + 1;
    END LOOP;
    RETURN created;
END
--@ timescale
BEGIN
    RETURN 0;
END
--@ end
$$;


-- Retention: drop every daily partition whose whole day ends at or before p_older_than, and delete
-- expired rows stranded in the default partition. Returns the dropped partitions' (chunks') names.
-- On TimescaleDB the retention policy does the same on its schedule.
CREATE FUNCTION gpuaware_drop_expired_partitions(p_older_than timestamptz) RETURNS text[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
--@ native
DECLARE
    r       record;
    dropped text[] := '{}';
BEGIN
    FOR r IN
        SELECT c.relname
        FROM pg_catalog.pg_inherits i
        JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'gpu_samples'::regclass
          AND c.relname ~ '^gpu_samples_p[0-9]{8}$'
          AND ((to_date(substr(c.relname, 14), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC') <= p_older_than
        ORDER BY c.relname
    LOOP
        EXECUTE format('DROP TABLE %I', r.relname);
        dropped := dropped || r.relname::text;
    END LOOP;
    DELETE FROM gpu_samples_default WHERE ts < p_older_than;
    RETURN dropped;
END
--@ timescale
BEGIN
    RETURN coalesce(ARRAY(SELECT c::text FROM drop_chunks('gpu_samples', older_than => p_older_than) AS c), '{}');
END
--@ end
$$;


-- One maintenance pass, meant to run every few minutes (collector loop or pg_cron):
-- premake today-1 .. today+p_ahead_days, give stranded default rows their partitions, apply retention.
CREATE FUNCTION gpuaware_maintain_partitions(p_now timestamptz, p_ahead_days integer, p_retention interval)
RETURNS TABLE (created integer, dropped text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
--@ native
DECLARE
    today date := (p_now AT TIME ZONE 'UTC')::date;
BEGIN
    dropped := gpuaware_drop_expired_partitions(p_now - p_retention);
    created := gpuaware_ensure_partitions(
        ARRAY(SELECT (today + g)::date FROM generate_series(-1, p_ahead_days) AS g)
        || ARRAY(SELECT DISTINCT (ts AT TIME ZONE 'UTC')::date FROM gpu_samples_default));
--@ timescale
BEGIN
    created := 0;
    dropped := gpuaware_drop_expired_partitions(p_now - p_retention);
--@ end
    RETURN NEXT;
END
$$;

REVOKE ALL ON FUNCTION gpuaware_ensure_partitions(date[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION gpuaware_drop_expired_partitions(timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION gpuaware_maintain_partitions(timestamptz, integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuaware_ensure_partitions(date[]) TO gpuaware_collector;
GRANT EXECUTE ON FUNCTION gpuaware_drop_expired_partitions(timestamptz) TO gpuaware_collector;
GRANT EXECUTE ON FUNCTION gpuaware_maintain_partitions(timestamptz, integer, interval) TO gpuaware_collector;
