-- What each node announces about its GPUs; one row per GPU, upserted by the collector.
CREATE TABLE gpu_inventory (
    gpu_uuid      text PRIMARY KEY,
    node          text        NOT NULL,
    gpu_index     integer     NOT NULL,
    model         text        NOT NULL,
    memory_mib    integer     NOT NULL,
    mig_mode      boolean     NOT NULL DEFAULT false,
    nvlink_island text,
    numa_node     integer,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX gpu_inventory_node ON gpu_inventory (node, gpu_index);

GRANT SELECT ON gpu_inventory TO gpuaware_reader;
GRANT SELECT, INSERT, UPDATE ON gpu_inventory TO gpuaware_collector;
