-- The metrics of the telemetry contract that 0003 did not store, and the agent's anomaly flags.
--
-- Why: the collector stores every metric column of GpuSampled, so nothing an agent measured is lost
-- between the bus and the history (tensor activity feeds the forecaster, correctable ECC and
-- remapped rows feed health scoring). Mapping of the contract onto the older columns, kept as is:
-- ecc_volatile/ecc_aggregate hold the *uncorrectable* counts, retired_rows holds the rows taken out
-- of service (uncorrectable remapped rows on Ampere and later, retired pages before).
--
-- Nullable columns without defaults: an ALTER that touches only the catalog, on a native partitioned
-- table (propagated to every partition) and on a compressed TimescaleDB hypertable alike.
ALTER TABLE gpu_samples ADD COLUMN mem_temperature_c real;
ALTER TABLE gpu_samples ADD COLUMN tensor_active_pct real;
ALTER TABLE gpu_samples ADD COLUMN ecc_corrected_volatile bigint;
ALTER TABLE gpu_samples ADD COLUMN ecc_corrected_aggregate bigint;
ALTER TABLE gpu_samples ADD COLUMN retired_pages integer;
ALTER TABLE gpu_samples ADD COLUMN remapped_rows_correctable integer;
ALTER TABLE gpu_samples ADD COLUMN row_remap_pending boolean;
ALTER TABLE gpu_samples ADD COLUMN anomaly_flags integer;
