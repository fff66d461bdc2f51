-- forecast_points.p10: the lower quantile published beside the p50 and p90. The demand series publish
-- 0.1, 0.5 and 0.9, so how often the actual fell inside the p10-p90 band is a query, as the p90's
-- coverage is. NULL where a series publishes no p10 (the per-GPU, per-node and per-GPU-model
-- utilisation series) and on the rows stored before this column.
--
-- The table's grants (0012) cover the new column: the forecasting role writes it, readers read it.
-- IF NOT EXISTS: applying it again (a schema_migrations row lost) changes nothing.
ALTER TABLE forecast_points ADD COLUMN IF NOT EXISTS p10 double precision;
