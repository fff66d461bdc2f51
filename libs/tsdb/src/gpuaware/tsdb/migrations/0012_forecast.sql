-- Forecasting's tables: the model registry, and the forecasts published beside the actuals they
-- predicted; the group role the forecasting service logs in through.
--
-- * forecast_models: one row per published model version: what it was trained on (data_window),
--   how it did on held-back data (metrics, beside the best baseline's), the ONNX bytes themselves.
--   The service serves the highest version and reloads when a higher one appears (hot reload);
--   `gpuaware forecast evaluate --model latest` reads the same row.
-- * forecast_points: one row per (series, origin, horizon): the p50/p90 published and which model and
--   version (or baseline, with the reason) produced them; `actual` is filled when the target time's
--   rollup arrives, so accuracy per model is a query, and drift is the same query over recent rows.
--
-- The role gpuaware_forecasting reads models and writes forecast points; publishing a model is an
-- operator's (or a training job's) act through the owner role, not the service's.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'gpuaware_forecasting') THEN
        BEGIN
            CREATE ROLE gpuaware_forecasting NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created by a concurrent migration in another database: the goal is met
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'cannot create role gpuaware_forecasting: the migrating user needs CREATEROLE, or create it beforehand';
        END;
    END IF;
END
$$;

CREATE TABLE forecast_models (
    version      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    step_s       double precision NOT NULL CHECK (step_s > 0),
    data_window  jsonb       NOT NULL DEFAULT '{}',
    metrics      jsonb       NOT NULL DEFAULT '{}',
    meta         jsonb       NOT NULL DEFAULT '{}',
    sha256       text        NOT NULL,
    onnx         bytea       NOT NULL
);
CREATE INDEX forecast_models_name ON forecast_models (name, version DESC);

CREATE TABLE forecast_points (
    issued_at      timestamptz      NOT NULL,
    series         text             NOT NULL,
    horizon_s      double precision NOT NULL,
    target_at      timestamptz      NOT NULL,
    model          text             NOT NULL,
    model_version  text             NOT NULL,
    p50            double precision NOT NULL,
    p90            double precision,
    fallback       text             NOT NULL DEFAULT '',
    actual         double precision,
    PRIMARY KEY (series, horizon_s, issued_at)
);
CREATE INDEX forecast_points_target ON forecast_points (series, target_at);
CREATE INDEX forecast_points_issued_brin ON forecast_points USING brin (issued_at);

GRANT SELECT ON forecast_models, forecast_points TO gpuaware_reader;
GRANT SELECT ON forecast_models TO gpuaware_forecasting;
GRANT SELECT, INSERT, UPDATE ON forecast_points TO gpuaware_forecasting;
