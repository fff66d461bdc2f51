-- The scheduling loop's audit trail: every pending pod, decision, verdict, binding, bind failure,
-- preemption and finish, as it crossed NATS (one row per stored stream message).
--
-- The key is (cluster, subject, msg_key): msg_key is the message's de-duplication id when it has
-- one, else what identifies the event (pod uid and attempt), so a recorder that reads a message
-- twice inserts nothing. The demo writes it (each run is its own cluster name) and reads the counts
-- back to show every decision landed here; an auditor asks "what happened to pod X" by pod_uid.
-- Volume is a few rows per pod, so this is a plain table on both backends.
CREATE TABLE placement_events (
    cluster      text        NOT NULL,
    subject      text        NOT NULL,
    msg_key      text        NOT NULL,
    pod_uid      text        NOT NULL,
    event_at     timestamptz NOT NULL,
    decision_id  text,
    node         text,
    gpu_milli    integer     NOT NULL DEFAULT 0,
    detail       text        NOT NULL DEFAULT '',
    payload      jsonb       NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, subject, msg_key)
);
CREATE INDEX placement_events_pod ON placement_events (cluster, pod_uid, event_at);

GRANT SELECT ON placement_events TO gpuaware_reader;
GRANT SELECT, INSERT ON placement_events TO gpuaware_collector;
