-- Time-weighted statistics of one closed window per GPU, for the rollups the collector publishes
-- (telemetry.gpu.rolledup.v1) to the forecaster and health scoring.
--
-- Why time-weighted and not avg(): agents send a GPU's row only when it moved or its heartbeat is
-- due (adaptive sampling), so a busy minute has 60 rows and a stable one 2. A plain average over
-- rows would overweight the busy part of a mixed window. Here each reading holds until the next one
-- (at most p_max_hold), the reading in effect when the window opens is carried in, and the mean
-- weighs each value by the seconds it held inside the window. max and p95 are over the readings
-- in effect during the window (p95 of readings, not of time: cheap and close enough for alerting).
-- Counters become deltas (the carried-in reading is the baseline), throttling a share of time.
--
-- SECURITY DEFINER so the collector, which may only INSERT into gpu_samples, can run it. Plain SQL
-- (window functions, percentile_cont): the same on TimescaleDB and native PostgreSQL.
CREATE FUNCTION gpuaware_window_rollups(p_lo timestamptz, p_hi timestamptz,
                                        p_max_hold interval DEFAULT INTERVAL '60 seconds')
RETURNS TABLE (
    node text, gpu_uuid text, samples bigint,
    util_mean double precision, util_max double precision, util_p95 double precision,
    mem_util_mean double precision, mem_util_max double precision, mem_util_p95 double precision,
    mem_used_mean double precision, mem_used_max double precision, mem_used_p95 double precision,
    temp_mean double precision, temp_max double precision, temp_p95 double precision,
    power_mean double precision, power_max double precision, power_p95 double precision,
    tensor_mean double precision, tensor_max double precision, tensor_p95 double precision,
    throttled_pct double precision,
    ecc_uncorrected_delta bigint, remapped_rows_delta bigint, pcie_replay_delta bigint,
    xid_last integer, anomaly_flags integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH readings AS (
        SELECT s.*, false AS carried FROM gpu_samples s WHERE s.ts >= p_lo AND s.ts < p_hi
        UNION ALL
        SELECT c.*, true FROM (
            SELECT DISTINCT ON (b.gpu_uuid) b.* FROM gpu_samples b
            WHERE b.ts >= p_lo - p_max_hold AND b.ts < p_lo
            ORDER BY b.gpu_uuid, b.ts DESC) c
    ),
    weighted AS (
        SELECT r.*,
               greatest(0.0, extract(epoch FROM
                   least(coalesce(lead(r.ts) OVER (PARTITION BY r.gpu_uuid ORDER BY r.ts), p_hi),
                         p_hi, r.ts + p_max_hold) - greatest(r.ts, p_lo)))::double precision AS w
        FROM readings r
    )
    SELECT x.node, x.gpu_uuid,
           count(*) FILTER (WHERE NOT x.carried),
           coalesce(sum(x.util_pct * x.w) / nullif(sum(x.w) FILTER (WHERE x.util_pct IS NOT NULL), 0),
                    avg(x.util_pct)),
           max(x.util_pct), percentile_cont(0.95) WITHIN GROUP (ORDER BY x.util_pct),
           coalesce(sum(x.mem_util_pct * x.w) / nullif(sum(x.w) FILTER (WHERE x.mem_util_pct IS NOT NULL), 0),
                    avg(x.mem_util_pct)),
           max(x.mem_util_pct), percentile_cont(0.95) WITHIN GROUP (ORDER BY x.mem_util_pct),
           coalesce(sum(x.mem_used_mib * x.w) / nullif(sum(x.w) FILTER (WHERE x.mem_used_mib IS NOT NULL), 0),
                    avg(x.mem_used_mib)),
           max(x.mem_used_mib), percentile_cont(0.95) WITHIN GROUP (ORDER BY x.mem_used_mib),
           coalesce(sum(x.temperature_c * x.w) / nullif(sum(x.w) FILTER (WHERE x.temperature_c IS NOT NULL), 0),
                    avg(x.temperature_c)),
           max(x.temperature_c), percentile_cont(0.95) WITHIN GROUP (ORDER BY x.temperature_c),
           coalesce(sum(x.power_w * x.w) / nullif(sum(x.w) FILTER (WHERE x.power_w IS NOT NULL), 0),
                    avg(x.power_w)),
           max(x.power_w), percentile_cont(0.95) WITHIN GROUP (ORDER BY x.power_w),
           coalesce(sum(x.tensor_active_pct * x.w)
                        / nullif(sum(x.w) FILTER (WHERE x.tensor_active_pct IS NOT NULL), 0),
                    avg(x.tensor_active_pct)),
           max(x.tensor_active_pct), percentile_cont(0.95) WITHIN GROUP (ORDER BY x.tensor_active_pct),
           100.0 * sum(x.w) FILTER (WHERE (x.throttle_reasons & ~1::bigint) <> 0)
                 / nullif(sum(x.w) FILTER (WHERE x.throttle_reasons IS NOT NULL), 0),
           greatest(0, max(x.ecc_aggregate) - min(x.ecc_aggregate)),
           greatest(0, max(x.retired_rows) - min(x.retired_rows))::bigint,
           greatest(0, max(x.pcie_replay) - min(x.pcie_replay)),
           CASE WHEN (array_agg(x.xid_last ORDER BY x.ts DESC) FILTER (WHERE NOT x.carried))[1] > 0
                 AND (array_agg(x.xid_last ORDER BY x.ts DESC) FILTER (WHERE NOT x.carried))[1]
                     IS DISTINCT FROM max(x.xid_last) FILTER (WHERE x.carried)
                THEN (array_agg(x.xid_last ORDER BY x.ts DESC) FILTER (WHERE NOT x.carried))[1] END,
           coalesce(bit_or(x.anomaly_flags) FILTER (WHERE NOT x.carried), 0)
    FROM weighted x
    GROUP BY x.node, x.gpu_uuid
    HAVING count(*) FILTER (WHERE NOT x.carried) > 0
    ORDER BY x.node, x.gpu_uuid
$$;
REVOKE ALL ON FUNCTION gpuaware_window_rollups(timestamptz, timestamptz, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuaware_window_rollups(timestamptz, timestamptz, interval)
    TO gpuaware_collector, gpuaware_reader;
