-- 1-minute and 1-hour rollups, gpu_metrics_1m and gpu_metrics_1h, with the same names, columns and
-- types on either backend, so dashboards and readers never change. Both compute the aggregates of
-- fragments/rollup_aggregates.sql from the raw samples, so averages are exact (no average of
-- averages); averages ignore NULL readings, `samples` counts every row. Buckets are aligned to UTC.
--
-- native: maintained TABLES. gpuaware_refresh_rollups(since, until) recomputes every bucket that
-- overlaps [since, until) from the raw samples (delete + insert under one lock), so late samples are
-- folded in by refreshing from their timestamp. Requires PostgreSQL >= 14 (date_bin).
--
-- TimescaleDB: continuous aggregates, real-time (materialized_only = false): a query sees the
-- materialized buckets plus the not-yet-materialized tail, so results are current without waiting
-- for the refresh policy. Retention keeps rollups far longer than raw samples (raw 30 days, 1m 90
-- days, 1h 2 years).
--@ native
CREATE TABLE gpu_metrics_1m (
    bucket            timestamptz      NOT NULL,
    node              text             NOT NULL,
    gpu_uuid          text             NOT NULL,
    samples           bigint           NOT NULL,
    util_avg          double precision,
    util_max          real,
    mem_util_avg      double precision,
    mem_used_avg      double precision,
    mem_used_max      integer,
    mem_total_mib     integer,
    temp_avg          double precision,
    temp_max          real,
    power_avg         double precision,
    power_max         real,
    sm_clock_avg      double precision,
    throttled_samples bigint,
    ecc_volatile_max  bigint,
    ecc_aggregate_max bigint,
    retired_rows_max  integer,
    xid_last_max      integer,
    pcie_replay_max   bigint,
    nvlink_up_min     integer,
    PRIMARY KEY (gpu_uuid, bucket, node)
);
CREATE INDEX gpu_metrics_1m_bucket ON gpu_metrics_1m (bucket);
CREATE INDEX gpu_metrics_1m_node_bucket ON gpu_metrics_1m (node, bucket);

CREATE TABLE gpu_metrics_1h (LIKE gpu_metrics_1m INCLUDING ALL);

--@ timescale
CREATE MATERIALIZED VIEW gpu_metrics_1m
WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS
SELECT time_bucket(INTERVAL '1 minute', ts) AS bucket,
       --@ include rollup_aggregates
FROM gpu_samples
GROUP BY time_bucket(INTERVAL '1 minute', ts), node, gpu_uuid
WITH NO DATA;

CREATE MATERIALIZED VIEW gpu_metrics_1h
WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS
SELECT time_bucket(INTERVAL '1 hour', ts) AS bucket,
       --@ include rollup_aggregates
FROM gpu_samples
GROUP BY time_bucket(INTERVAL '1 hour', ts), node, gpu_uuid
WITH NO DATA;

-- refresh windows span several buckets (a policy needs at least two) and stop one bucket short of now
SELECT add_continuous_aggregate_policy('gpu_metrics_1m', start_offset => INTERVAL '2 hours',
       end_offset => INTERVAL '1 minute', schedule_interval => INTERVAL '1 minute', if_not_exists => TRUE);
SELECT add_continuous_aggregate_policy('gpu_metrics_1h', start_offset => INTERVAL '2 days',
       end_offset => INTERVAL '1 hour', schedule_interval => INTERVAL '15 minutes', if_not_exists => TRUE);
SELECT add_retention_policy('gpu_metrics_1m', drop_after => INTERVAL '90 days', if_not_exists => TRUE);
SELECT add_retention_policy('gpu_metrics_1h', drop_after => INTERVAL '730 days', if_not_exists => TRUE);

--@ end

GRANT SELECT ON gpu_metrics_1m, gpu_metrics_1h TO gpuaware_reader;


--@ native
-- The one definition of the rollup arithmetic: samples in [p_lo, p_hi) grouped into p_width buckets.
CREATE FUNCTION gpuaware_rollup(p_width interval, p_lo timestamptz, p_hi timestamptz)
RETURNS SETOF gpu_metrics_1m
LANGUAGE sql STABLE SET search_path = public, pg_temp AS $$
    SELECT date_bin(p_width, ts, TIMESTAMPTZ '2000-01-01 00:00:00+00') AS bucket,
           --@ include rollup_aggregates
    FROM gpu_samples
    WHERE ts >= p_lo AND ts < p_hi
    GROUP BY 1, 2, 3
$$;
REVOKE ALL ON FUNCTION gpuaware_rollup(interval, timestamptz, timestamptz) FROM PUBLIC;


--@ end
-- Recompute both rollups for every bucket overlapping [p_since, p_until) (p_until NULL = no end);
-- returns the number of rollup rows written. With TimescaleDB, refresh_continuous_aggregate is a
-- procedure that commits, so it cannot run inside a function: gpuaware.tsdb.refresh_rollups issues
-- the CALLs itself, and this function only says so (it keeps the SQL API the same on both).
CREATE FUNCTION gpuaware_refresh_rollups(p_since timestamptz, p_until timestamptz DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
--@ native
DECLARE
    origin constant timestamptz := TIMESTAMPTZ '2000-01-01 00:00:00+00';
    width  interval;
    target text;
    lo     timestamptz;
    hi     timestamptz;
    n      bigint;
    total  bigint := 0;
BEGIN
    -- two refreshers deleting and re-inserting the same buckets would collide on the primary key
    PERFORM pg_advisory_xact_lock(7235878716452150002);

    FOR width, target IN SELECT * FROM (VALUES (INTERVAL '1 minute', 'gpu_metrics_1m'),
                                               (INTERVAL '1 hour', 'gpu_metrics_1h')) AS r LOOP
        lo := date_bin(width, p_since, origin);
        hi := CASE WHEN p_until IS NULL THEN TIMESTAMPTZ 'infinity'
                   ELSE date_bin(width, p_until - INTERVAL '1 microsecond', origin) + width END;
        EXECUTE format('DELETE FROM %I WHERE bucket >= $1 AND bucket < $2', target) USING lo, hi;
        EXECUTE format('INSERT INTO %I SELECT * FROM gpuaware_rollup($1, $2, $3)', target) USING width, lo, hi;
        GET DIAGNOSTICS n = ROW_COUNT;
        total := total + n;
    END LOOP;
    RETURN total;
END
--@ timescale
BEGIN
    RAISE EXCEPTION 'with TimescaleDB, refresh with CALL refresh_continuous_aggregate(...) outside a transaction'
        USING ERRCODE = 'feature_not_supported';
END
--@ end
$$;


-- Rollup retention on demand (TimescaleDB's policies do the same on their schedule); returns the rows
-- deleted natively, the chunks dropped with TimescaleDB.
CREATE FUNCTION gpuaware_drop_expired_rollups(p_1m_older_than timestamptz, p_1h_older_than timestamptz)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
--@ native
DECLARE
    n     bigint;
    total bigint := 0;
BEGIN
    DELETE FROM gpu_metrics_1m WHERE bucket < p_1m_older_than;
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    DELETE FROM gpu_metrics_1h WHERE bucket < p_1h_older_than;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN total + n;
END
--@ timescale
BEGIN
    RETURN (SELECT count(*) FROM drop_chunks('gpu_metrics_1m', older_than => p_1m_older_than))
         + (SELECT count(*) FROM drop_chunks('gpu_metrics_1h', older_than => p_1h_older_than));
END
--@ end
$$;

REVOKE ALL ON FUNCTION gpuaware_refresh_rollups(timestamptz, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION gpuaware_drop_expired_rollups(timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuaware_refresh_rollups(timestamptz, timestamptz) TO gpuaware_collector;
GRANT EXECUTE ON FUNCTION gpuaware_drop_expired_rollups(timestamptz, timestamptz) TO gpuaware_collector;
