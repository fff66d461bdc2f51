-- 1-minute and 1-hour rollups on plain PostgreSQL: maintained TABLES with exactly the names, columns
-- and types of the TimescaleDB continuous aggregates, so dashboards and readers never change.
--
-- gpuaware_refresh_rollups(since, until) recomputes every bucket that overlaps [since, until) from
-- the raw samples (delete + insert under one lock), so late samples are folded in by refreshing from
-- their timestamp. Buckets are aligned to UTC (date_bin with a UTC origin), like time_bucket.
-- Averages ignore NULL readings; `samples` counts every row. Requires PostgreSQL >= 14 (date_bin).
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

GRANT SELECT ON gpu_metrics_1m, gpu_metrics_1h TO gpuaware_reader;


-- The one definition of the rollup arithmetic: samples in [p_lo, p_hi) grouped into p_width buckets.
CREATE FUNCTION gpuaware_rollup(p_width interval, p_lo timestamptz, p_hi timestamptz)
RETURNS SETOF gpu_metrics_1m
LANGUAGE sql STABLE SET search_path = public, pg_temp AS $$
    SELECT date_bin(p_width, ts, TIMESTAMPTZ '2000-01-01 00:00:00+00') AS bucket,
           node,
           gpu_uuid,
           count(*)                                      AS samples,
           avg(util_pct)                                 AS util_avg,
           max(util_pct)                                 AS util_max,
           avg(mem_util_pct)                             AS mem_util_avg,
           avg(mem_used_mib::double precision)           AS mem_used_avg,
           max(mem_used_mib)                             AS mem_used_max,
           max(mem_total_mib)                            AS mem_total_mib,
           avg(temperature_c)                            AS temp_avg,
           max(temperature_c)                            AS temp_max,
           avg(power_w)                                  AS power_avg,
           max(power_w)                                  AS power_max,
           avg(sm_clock_mhz::double precision)           AS sm_clock_avg,
           count(*) FILTER (WHERE throttle_reasons <> 0) AS throttled_samples,
           max(ecc_volatile)                             AS ecc_volatile_max,
           max(ecc_aggregate)                            AS ecc_aggregate_max,
           max(retired_rows)                             AS retired_rows_max,
           max(xid_last)                                 AS xid_last_max,
           max(pcie_replay)                              AS pcie_replay_max,
           min(nvlink_up)                                AS nvlink_up_min
    FROM gpu_samples
    WHERE ts >= p_lo AND ts < p_hi
    GROUP BY 1, 2, 3
$$;
REVOKE ALL ON FUNCTION gpuaware_rollup(interval, timestamptz, timestamptz) FROM PUBLIC;


-- Recompute both rollups for every bucket overlapping [p_since, p_until) (p_until NULL = no end);
-- returns the number of rollup rows written.
CREATE FUNCTION gpuaware_refresh_rollups(p_since timestamptz, p_until timestamptz DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    origin constant timestamptz := TIMESTAMPTZ '2000-01-01 00:00:00+00';
    lo     timestamptz;
    hi     timestamptz;
    n      bigint;
    total  bigint := 0;
BEGIN
    -- two refreshers deleting and re-inserting the same buckets would collide on the primary key
    PERFORM pg_advisory_xact_lock(7235878716452150002);

    lo := date_bin(INTERVAL '1 minute', p_since, origin);
    hi := CASE WHEN p_until IS NULL THEN TIMESTAMPTZ 'infinity'
               ELSE date_bin(INTERVAL '1 minute', p_until - INTERVAL '1 microsecond', origin) + INTERVAL '1 minute' END;
    DELETE FROM gpu_metrics_1m WHERE bucket >= lo AND bucket < hi;
    INSERT INTO gpu_metrics_1m SELECT * FROM gpuaware_rollup(INTERVAL '1 minute', lo, hi);
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;

    lo := date_bin(INTERVAL '1 hour', p_since, origin);
    hi := CASE WHEN p_until IS NULL THEN TIMESTAMPTZ 'infinity'
               ELSE date_bin(INTERVAL '1 hour', p_until - INTERVAL '1 microsecond', origin) + INTERVAL '1 hour' END;
    DELETE FROM gpu_metrics_1h WHERE bucket >= lo AND bucket < hi;
    INSERT INTO gpu_metrics_1h SELECT * FROM gpuaware_rollup(INTERVAL '1 hour', lo, hi);
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    RETURN total;
END
$$;


-- Rollup retention (the TimescaleDB variant has policies for this); returns rows deleted.
CREATE FUNCTION gpuaware_drop_expired_rollups(p_1m_older_than timestamptz, p_1h_older_than timestamptz)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
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
$$;

REVOKE ALL ON FUNCTION gpuaware_refresh_rollups(timestamptz, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION gpuaware_drop_expired_rollups(timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuaware_refresh_rollups(timestamptz, timestamptz) TO gpuaware_collector;
GRANT EXECUTE ON FUNCTION gpuaware_drop_expired_rollups(timestamptz, timestamptz) TO gpuaware_collector;
