-- Raw GPU samples as a TimescaleDB hypertable: 1-day chunks, compressed after 7 days (segmented by
-- GPU, so one GPU's history decompresses alone), dropped after 30 days by a background policy.
--
-- The columns, key and indexes match the native variant exactly; so do the maintenance functions'
-- names and signatures (chunks appear on demand, so "ensure" has nothing to do), so callers never
-- branch on the backend. Uses the create_hypertable/compression API that every TimescaleDB 2.x has.
CREATE EXTENSION IF NOT EXISTS timescaledb;

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
);

SELECT create_hypertable('gpu_samples', 'ts', chunk_time_interval => INTERVAL '1 day', if_not_exists => TRUE);

CREATE INDEX gpu_samples_node_ts ON gpu_samples (node, ts DESC);

ALTER TABLE gpu_samples SET (
    timescaledb.compress,
    timescaledb.compress_segmentby = 'gpu_uuid',
    timescaledb.compress_orderby = 'ts DESC'
);
SELECT add_compression_policy('gpu_samples', compress_after => INTERVAL '7 days', if_not_exists => TRUE);
SELECT add_retention_policy('gpu_samples', drop_after => INTERVAL '30 days', if_not_exists => TRUE);

GRANT SELECT ON gpu_samples TO gpuaware_reader;
GRANT INSERT ON gpu_samples TO gpuaware_collector;


-- Chunks are created by TimescaleDB on insert: nothing to ensure.
CREATE FUNCTION gpuaware_ensure_partitions(p_days date[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN 0;
END
$$;

-- Retention on demand (the policy above does the same on its schedule).
CREATE FUNCTION gpuaware_drop_expired_partitions(p_older_than timestamptz) RETURNS text[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    RETURN coalesce(ARRAY(SELECT c::text FROM drop_chunks('gpu_samples', older_than => p_older_than) AS c), '{}');
END
$$;

CREATE FUNCTION gpuaware_maintain_partitions(p_now timestamptz, p_ahead_days integer, p_retention interval)
RETURNS TABLE (created integer, dropped text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    created := 0;
    dropped := gpuaware_drop_expired_partitions(p_now - p_retention);
    RETURN NEXT;
END
$$;

REVOKE ALL ON FUNCTION gpuaware_ensure_partitions(date[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION gpuaware_drop_expired_partitions(timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION gpuaware_maintain_partitions(timestamptz, integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuaware_ensure_partitions(date[]) TO gpuaware_collector;
GRANT EXECUTE ON FUNCTION gpuaware_drop_expired_partitions(timestamptz) TO gpuaware_collector;
GRANT EXECUTE ON FUNCTION gpuaware_maintain_partitions(timestamptz, integer, interval) TO gpuaware_collector;
