-- A maintenance pass takes the parent's lock before it reads anything, so passes run one after the
-- other (writers' INSERTs and readers are not blocked). Two collector replicas starting together both
-- run a pass; without the lock one pass reads the default partition (ACCESS SHARE, held to the end of
-- its transaction) and then waits for the parent's SHARE UPDATE EXCLUSIVE lock, which the other holds
-- while its ATTACH PARTITION waits for ACCESS EXCLUSIVE on that same default partition: a deadlock.
--
-- Nothing to change on TimescaleDB: its maintenance pass creates no partitions (chunks are made by the
-- extension) and reads no default partition, so two replicas' passes cannot deadlock.
--@ native
CREATE OR REPLACE FUNCTION gpuaware_maintain_partitions(p_now timestamptz, p_ahead_days integer,
                                                        p_retention interval)
RETURNS TABLE (created integer, dropped text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    today date := (p_now AT TIME ZONE 'UTC')::date;
BEGIN
    LOCK TABLE ONLY gpu_samples IN SHARE UPDATE EXCLUSIVE MODE;
    dropped := gpuaware_drop_expired_partitions(p_now - p_retention);
    created := gpuaware_ensure_partitions(
        ARRAY(SELECT (today + g)::date FROM generate_series(-1, p_ahead_days) AS g)
        || ARRAY(SELECT DISTINCT (ts AT TIME ZONE 'UTC')::date FROM gpu_samples_default));
    RETURN NEXT;
END
$$;
--@ timescale
SELECT 1;
--@ end
