-- The job outbox: jobs staged in the application's own transaction (producer.outbox.stage),
-- moved to Kafka by `producer outbox relay`. Idempotent: safe to run again.
-- `producer outbox init --dsn ...` runs exactly this file; a migration tool may ship it instead.
CREATE TABLE IF NOT EXISTS job_outbox (
    id        bigserial PRIMARY KEY,
    job_id    text NOT NULL UNIQUE,
    queue     text NOT NULL,
    tenant_id text NOT NULL,
    envelope  bytea NOT NULL,
    staged_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Relay lag is the age of the oldest staged row.
CREATE INDEX IF NOT EXISTS job_outbox_staged_at ON job_outbox (staged_at);

-- Wakes the relay when a staging transaction commits (a rolled-back one notifies nobody).
CREATE OR REPLACE FUNCTION job_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('job_outbox', '');
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS job_outbox_notify ON job_outbox;
CREATE TRIGGER job_outbox_notify AFTER INSERT ON job_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION job_outbox_notify();

-- The active relay's memory, so a relay killed between produce and delete does not
-- send its last batch twice: before producing, the highest row id in flight and, per
-- partition, an offset below every record the batch may write; on taking over, a relay
-- reads those partitions from there and deletes the rows whose job ids already landed.
CREATE TABLE IF NOT EXISTS job_outbox_relay (
    singleton       boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    inflight_max_id bigint,
    marks           jsonb NOT NULL DEFAULT '{}'
);
INSERT INTO job_outbox_relay DEFAULT VALUES ON CONFLICT DO NOTHING;

-- Rows the relay set aside because they can never be sent (too large, unknown priority
-- class, a topic missing past --missing-topic-grace, not authorised, undecodable): moved
-- here with the reason, in the transaction that deletes them from job_outbox, and kept
-- with their columns so `producer outbox dead retry` can stage them again (the same job
-- id) or `producer outbox dead drop` can forget them. Created on an existing database
-- too: running this file again is how a deployment upgrades.
CREATE TABLE IF NOT EXISTS job_outbox_dead (
    id           bigserial PRIMARY KEY,
    outbox_id    bigint NOT NULL,
    job_id       text NOT NULL,
    queue        text NOT NULL,
    tenant_id    text NOT NULL,
    envelope     bytea NOT NULL,
    staged_at    timestamptz NOT NULL,
    type         text,
    ordering_key text,
    reason       text NOT NULL,
    error        text NOT NULL,
    dead_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Under --on-dead block the relay reads the ordering keys that have a dead row each pass.
CREATE INDEX IF NOT EXISTS job_outbox_dead_key ON job_outbox_dead (queue, tenant_id, ordering_key)
    WHERE ordering_key IS NOT NULL;
