-- Nothing to change on TimescaleDB: its maintenance pass creates no partitions (chunks are made by the
-- extension) and reads no default partition, so two replicas' passes cannot deadlock. The native
-- variant serialises its passes (0013_maintenance_lock.native.sql).
SELECT 1;
