-- Per-pod GPU usage reported by the node agents (telemetry.pod.usage.v1), and per-tenant views.
--
-- One row per (pod, GPU, window): what the pod held (gpu_seconds_allocated) and used
-- (gpu_seconds_used) of that GPU. The key makes a redelivered report insert nothing. Volume is a
-- row per running pod per minute, small next to gpu_samples, so this is a plain table on both
-- backends (no hypertable, no partitions) and the views are plain SQL: identical whether TimescaleDB
-- is present or not. Retention deletes old windows (gpuaware_drop_expired_pod_usage).
CREATE TABLE gpu_pod_usage (
    window_start          timestamptz      NOT NULL,
    window_s              real             NOT NULL,
    node                  text             NOT NULL,
    gpu_uuid              text             NOT NULL,
    namespace             text             NOT NULL,
    pod                   text             NOT NULL,
    pod_uid               text,
    tenant                text             NOT NULL,
    gpu_milli             integer          NOT NULL,
    seconds               real             NOT NULL,
    gpu_seconds_allocated double precision NOT NULL,
    gpu_seconds_used      double precision NOT NULL,
    util_pct_avg          real             NOT NULL,
    util_pct_max          real             NOT NULL,
    mem_used_mib_avg      real             NOT NULL,
    mem_used_mib_max      real             NOT NULL,
    attribution           text             NOT NULL DEFAULT 'share',
    PRIMARY KEY (gpu_uuid, namespace, pod, window_start)
);
CREATE INDEX gpu_pod_usage_tenant ON gpu_pod_usage (tenant, window_start);
CREATE INDEX gpu_pod_usage_window ON gpu_pod_usage (window_start);

-- hourly per pod (all its GPUs), per tenant, and daily per tenant; buckets are UTC hours/days
-- (date_trunc with a time zone: no extension function, so the same text runs on both backends)
CREATE VIEW pod_usage_1h AS
SELECT date_trunc('hour', window_start, 'UTC') AS bucket,
       tenant, namespace, pod,
       count(DISTINCT gpu_uuid)   AS gpus,
       sum(seconds)               AS seconds,
       sum(gpu_seconds_allocated) AS gpu_seconds_allocated,
       sum(gpu_seconds_used)      AS gpu_seconds_used,
       max(util_pct_max)          AS util_pct_max,
       max(mem_used_mib_max)      AS mem_used_mib_max
FROM gpu_pod_usage
GROUP BY 1, 2, 3, 4;

CREATE VIEW tenant_usage_1h AS
SELECT date_trunc('hour', window_start, 'UTC') AS bucket,
       tenant,
       count(DISTINCT (namespace, pod)) AS pods,
       count(DISTINCT gpu_uuid)         AS gpus,
       sum(gpu_seconds_allocated)       AS gpu_seconds_allocated,
       sum(gpu_seconds_used)            AS gpu_seconds_used
FROM gpu_pod_usage
GROUP BY 1, 2;

CREATE VIEW tenant_usage_1d AS
SELECT date_trunc('day', window_start, 'UTC') AS bucket,
       tenant,
       count(DISTINCT (namespace, pod)) AS pods,
       count(DISTINCT gpu_uuid)         AS gpus,
       sum(gpu_seconds_allocated)       AS gpu_seconds_allocated,
       sum(gpu_seconds_used)            AS gpu_seconds_used
FROM gpu_pod_usage
GROUP BY 1, 2;

GRANT SELECT ON gpu_pod_usage, pod_usage_1h, tenant_usage_1h, tenant_usage_1d TO gpuaware_reader;
GRANT INSERT ON gpu_pod_usage TO gpuaware_collector;


-- Retention on demand (collector maintenance loop or pg_cron); returns rows deleted.
CREATE FUNCTION gpuaware_drop_expired_pod_usage(p_older_than timestamptz) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    n bigint;
BEGIN
    DELETE FROM gpu_pod_usage WHERE window_start < p_older_than;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
REVOKE ALL ON FUNCTION gpuaware_drop_expired_pod_usage(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuaware_drop_expired_pod_usage(timestamptz) TO gpuaware_collector;
