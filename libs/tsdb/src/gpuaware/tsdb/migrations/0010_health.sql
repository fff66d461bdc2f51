-- Health scoring's tables: the score history, each GPU's remembered state, alerts, and the audit
-- trail of manual overrides; the group role the health-scoring service logs in through.
--
-- Why these four:
-- * health_scores: one row per GPU per published score (a window, a state change, a tick): what a
--   dashboard plots and an auditor reads ("when did GPU X go quarantined, and why"). Keyed on
--   (cluster, gpu_uuid, ts), so a redelivered observation that republishes stores nothing twice.
-- * health_gpu_state: what gpuaware.health remembers about each GPU (its GpuTrack as JSON: hysteresis
--   clocks, counter baselines, override, audit, bad-input counters), one row per GPU, upserted when it
--   changed. A restart loads it back: states do not flip, counters are not counted twice.
-- * health_alerts: every alert raised, one row per (fingerprint, started_at); resolved_at stays NULL
--   while it is open and `active` holds the AlertBook's record of it, so a restart re-raises nothing.
-- * health_overrides: every cordon and uncordon: who, when, why, the state before and after.
--
-- The role gpuaware_health may insert scores and overrides and upsert states and alerts; it may not
-- delete or touch other services' tables. Retention runs through a SECURITY DEFINER function with
-- the same name and signature on both backends.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'gpuaware_health') THEN
        BEGIN
            CREATE ROLE gpuaware_health NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created by a concurrent migration in another database: the goal is met
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'cannot create role gpuaware_health: the migrating user needs CREATEROLE, or create it beforehand';
        END;
    END IF;
END
$$;

CREATE TABLE health_scores (
    ts          timestamptz      NOT NULL,
    cluster     text             NOT NULL,
    node        text             NOT NULL,
    gpu_uuid    text             NOT NULL,
    gpu_index   integer          NOT NULL DEFAULT 0,
    score       real             NOT NULL,
    state       text             NOT NULL CHECK (state IN ('healthy', 'degraded', 'quarantined')),
    risk        double precision NOT NULL DEFAULT 0,
    changed     boolean          NOT NULL DEFAULT false,
    previous    text             CHECK (previous IN ('healthy', 'degraded', 'quarantined')),
    cause       text             NOT NULL DEFAULT '',
    components  jsonb            NOT NULL DEFAULT '{}',
    reasons     jsonb            NOT NULL DEFAULT '[]',
    PRIMARY KEY (cluster, gpu_uuid, ts)
);
--@ native
-- Native: a plain table (a score per GPU per minute is 1/60 of the raw samples' rows; deleting
-- expired days is cheap at that size), a BRIN index for time ranges, retention by DELETE.
CREATE INDEX health_scores_ts_brin ON health_scores USING brin (ts);
--@ timescale
-- TimescaleDB: a hypertable of 1-day chunks, kept 90 days by a background policy (the native
-- variant's retention function does the same on demand). Not compressed: a row per GPU per minute.
SELECT create_hypertable('health_scores', 'ts', chunk_time_interval => INTERVAL '1 day', if_not_exists => TRUE);
SELECT add_retention_policy('health_scores', drop_after => INTERVAL '90 days', if_not_exists => TRUE);
--@ end

CREATE TABLE health_gpu_state (
    cluster     text        NOT NULL,
    gpu_uuid    text        NOT NULL,
    node        text        NOT NULL DEFAULT '',
    state       text        NOT NULL CHECK (state IN ('healthy', 'degraded', 'quarantined')),
    track       jsonb       NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, gpu_uuid)
);

CREATE TABLE health_alerts (
    cluster      text        NOT NULL,
    fingerprint  text        NOT NULL,
    started_at   timestamptz NOT NULL,
    rule         text        NOT NULL,
    severity     text        NOT NULL,
    gpu_uuid     text,
    node         text,
    summary      text        NOT NULL DEFAULT '',
    resolved_at  timestamptz,
    active       jsonb,
    PRIMARY KEY (cluster, fingerprint, started_at)
);
CREATE INDEX health_alerts_open ON health_alerts (cluster) WHERE resolved_at IS NULL;
CREATE INDEX health_alerts_gpu ON health_alerts (cluster, gpu_uuid, started_at);

CREATE TABLE health_overrides (
    cluster       text        NOT NULL,
    gpu_uuid      text        NOT NULL,
    at            timestamptz NOT NULL,
    action        text        NOT NULL CHECK (action IN ('cordon', 'uncordon')),
    reason        text        NOT NULL,
    requested_by  text        NOT NULL,
    previous      text        NOT NULL,
    current       text        NOT NULL,
    cleared       boolean     NOT NULL DEFAULT false,
    node          text        NOT NULL DEFAULT '',
    PRIMARY KEY (cluster, gpu_uuid, at, action)
);

GRANT SELECT ON health_scores, health_gpu_state, health_alerts, health_overrides TO gpuaware_reader;
GRANT SELECT, INSERT ON health_overrides TO gpuaware_health;
GRANT SELECT, INSERT, UPDATE ON health_scores, health_gpu_state, health_alerts TO gpuaware_health;


-- Retention on demand: scores older than p_older_than (rows natively, chunks with TimescaleDB), and
-- alerts resolved before it. Returns the rows (chunks) deleted.
CREATE FUNCTION gpuaware_expire_health(p_older_than timestamptz) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    n  bigint;
    m  bigint;
BEGIN
--@ native
    DELETE FROM health_scores WHERE ts < p_older_than;
    GET DIAGNOSTICS n = ROW_COUNT;
--@ timescale
    SELECT count(*) INTO n FROM drop_chunks('health_scores', older_than => p_older_than);
--@ end
    DELETE FROM health_alerts WHERE resolved_at < p_older_than;
    GET DIAGNOSTICS m = ROW_COUNT;
    RETURN n + m;
END
$$;

REVOKE ALL ON FUNCTION gpuaware_expire_health(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION gpuaware_expire_health(timestamptz) TO gpuaware_health;
