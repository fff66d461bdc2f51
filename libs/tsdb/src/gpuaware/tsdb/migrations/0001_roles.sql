-- Per-service group roles (NOLOGIN). Services log in as their own LOGIN roles that are members of
-- one of these, so a leaked collector password can write samples but never drop or read elsewhere.
-- Roles are cluster-wide: another database of the same cluster may create them at the same moment,
-- so a concurrent duplicate is expected and tolerated; a missing CREATEROLE right is not.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['gpuaware_reader', 'gpuaware_collector'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION
                WHEN duplicate_object OR unique_violation THEN
                    NULL;  -- created by a concurrent migration in another database: the goal is met
                WHEN insufficient_privilege THEN
                    RAISE EXCEPTION 'cannot create role %: the migrating user needs CREATEROLE, or create it beforehand', r;
            END;
        END IF;
    END LOOP;
END
$$;
