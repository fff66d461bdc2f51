-- The demo's publish -> consume -> store check: a consumer stores each message it receives under its
-- message id; redelivery hits the primary key and is ignored.
CREATE TABLE bus_roundtrip (
    id          text PRIMARY KEY,
    subject     text        NOT NULL,
    payload     jsonb       NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);

GRANT SELECT ON bus_roundtrip TO gpuaware_reader;
GRANT SELECT, INSERT ON bus_roundtrip TO gpuaware_collector;
