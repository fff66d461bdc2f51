-- Quota's tables: chargeback intervals and the usage snapshots it publishes; the group role the
-- quota service logs in through.
--
-- Why these two:
-- * quota_intervals: one row per pod per binding, from its binder.pod.bound event to its finished or
--   preempted event, with what it held (thousandths of a GPU, MiB of GPU memory). Keyed on
--   (cluster, pod_uid, started_at): a redelivered or replayed bound event inserts nothing
--   (ON CONFLICT DO NOTHING) and an end event closes only an open interval, so a restart that
--   replays the binder's stream does not count a second twice. A pod preempted and bound again is
--   two rows. GPU-seconds over a window are the overlap of each row with it (gpuaware.quota.charge).
-- * quota_usage: every QuotaUsageReported snapshot, one row per queue (used, guaranteed, fair share,
--   Jain's index of the snapshot): usage against guarantee and fair share over time.
--
-- The role gpuaware_quota may insert and update intervals and insert snapshots; it may not delete.
-- Plain tables on both backends: an interval per pod binding and a row per queue per report are
-- small next to telemetry.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'gpuaware_quota') THEN
        BEGIN
            CREATE ROLE gpuaware_quota NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created by a concurrent migration in another database: the goal is met
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'cannot create role gpuaware_quota: the migrating user needs CREATEROLE, or create it beforehand';
        END;
    END IF;
END
$$;

CREATE TABLE quota_intervals (
    cluster         text        NOT NULL,
    pod_uid         text        NOT NULL,
    started_at      timestamptz NOT NULL,
    queue           text        NOT NULL,
    tenant          text        NOT NULL,
    namespace       text        NOT NULL DEFAULT '',
    pod_name        text        NOT NULL DEFAULT '',
    node            text        NOT NULL DEFAULT '',
    gpu_milli       integer     NOT NULL CHECK (gpu_milli >= 0),
    gpu_memory_mib  bigint      NOT NULL CHECK (gpu_memory_mib >= 0),
    ended_at        timestamptz,
    outcome         text        NOT NULL DEFAULT '',
    PRIMARY KEY (cluster, pod_uid, started_at),
    CHECK (ended_at IS NULL OR ended_at >= started_at)
);
CREATE INDEX quota_intervals_open ON quota_intervals (cluster, pod_uid) WHERE ended_at IS NULL;
CREATE INDEX quota_intervals_time ON quota_intervals (cluster, started_at);

CREATE TABLE quota_usage (
    ts                    timestamptz      NOT NULL,
    cluster               text             NOT NULL,
    queue                 text             NOT NULL,
    parent                text,
    used_gpu_milli        bigint           NOT NULL,
    guaranteed_gpu_milli  bigint           NOT NULL,
    fair_share_gpu_milli  bigint           NOT NULL,
    running_pods          integer          NOT NULL DEFAULT 0,
    pending_pods          integer          NOT NULL DEFAULT 0,
    jain_index            double precision,
    PRIMARY KEY (cluster, queue, ts)
);
CREATE INDEX quota_usage_ts_brin ON quota_usage USING brin (ts);

GRANT SELECT ON quota_intervals, quota_usage TO gpuaware_reader;
GRANT SELECT, INSERT, UPDATE ON quota_intervals TO gpuaware_quota;
GRANT SELECT, INSERT ON quota_usage TO gpuaware_quota;
