-- 1-minute and 1-hour rollups as TimescaleDB continuous aggregates, with the same names, columns and
-- types as the native variant's tables. Real-time (materialized_only = false): a query sees the
-- materialized buckets plus the not-yet-materialized tail, so results are current without waiting
-- for the refresh policy. Both read the raw hypertable, so averages are exact (no average of averages).
-- Retention keeps rollups far longer than raw samples (raw 30 days, 1m 90 days, 1h 2 years).
CREATE MATERIALIZED VIEW gpu_metrics_1m
WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS
SELECT time_bucket(INTERVAL '1 minute', ts)          AS bucket,
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
GROUP BY time_bucket(INTERVAL '1 minute', ts), node, gpu_uuid
WITH NO DATA;

CREATE MATERIALIZED VIEW gpu_metrics_1h
WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS
SELECT time_bucket(INTERVAL '1 hour', ts)            AS bucket,
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
GROUP BY time_bucket(INTERVAL '1 hour', ts), node, gpu_uuid
WITH NO DATA;

-- refresh windows span several buckets (a policy needs at least two) and stop one bucket short of now
SELECT add_continuous_aggregate_policy('gpu_metrics_1m', start_offset => INTERVAL '2 hours',
       end_offset => INTERVAL '1 minute', schedule_interval => INTERVAL '1 minute', if_not_exists => TRUE);
SELECT add_continuous_aggregate_policy('gpu_metrics_1h', start_offset => INTERVAL '2 days',
       end_offset => INTERVAL '1 hour', schedule_interval => INTERVAL '15 minutes', if_not_exists => TRUE);
SELECT add_retention_policy('gpu_metrics_1m', drop_after => INTERVAL '90 days', if_not_exists => TRUE);
SELECT add_retention_policy('gpu_metrics_1h', drop_after => INTERVAL '730 days', if_not_exists => TRUE);

GRANT SELECT ON gpu_metrics_1m, gpu_metrics_1h TO gpuaware_reader;


-- refresh_continuous_aggregate is a procedure that commits, so it cannot run inside a function;
-- gpuaware.tsdb.refresh_rollups issues the CALLs itself. This stub keeps the SQL API symmetric.
CREATE FUNCTION gpuaware_refresh_rollups(p_since timestamptz, p_until timestamptz DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'with TimescaleDB, refresh with CALL refresh_continuous_aggregate(...) outside a transaction'
        USING ERRCODE = 'feature_not_supported';
END
$$;

-- Rollup retention on demand (the policies above do the same on their schedule).
CREATE FUNCTION gpuaware_drop_expired_rollups(p_1m_older_than timestamptz, p_1h_older_than timestamptz)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN (SELECT count(*) FROM drop_chunks('gpu_metrics_1m', older_than => p_1m_older_than))
         + (SELECT count(*) FROM drop_chunks('gpu_metrics_1h', older_than => p_1h_older_than));
END
$$;

REVOKE ALL ON FUNCTION gpuaware_refresh_rollups(timestamptz, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION gpuaware_drop_expired_rollups(timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuaware_refresh_rollups(timestamptz, timestamptz) TO gpuaware_collector;
GRANT EXECUTE ON FUNCTION gpuaware_drop_expired_rollups(timestamptz, timestamptz) TO gpuaware_collector;
