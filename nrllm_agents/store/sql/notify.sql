-- Every PostgreSQL trigger of nrllm_agents, in one place. Nothing of this runs on SQLite (there
-- the cancel watcher and the live stream poll).
--
-- The migrations read their sections from this file (nrllm_agents.store.triggers.section), by
-- the migration's name: a section's text is exactly what its migration applies, so a change of
-- a trigger is a new section and a new migration, never an edit of an existing section (a
-- database migrated before the edit would differ from one migrated after it). Each trigger is
-- sent from inside the writing transaction, so PostgreSQL delivers it only once that commits,
-- whichever code path wrote. tests/integration/store/test_notify_sql.py checks that the
-- migrated schema is what the current sections create.
--
-- In force today:
--   nrllm_agents_notify_cancel   (0003_cancel_notify)  every cancel, on nrllm_cancel
--   nrllm_agents_notify_settled  (0010_targeted_push)  a watched run settling, or its cancel
--                                                      acknowledged, on the run's own channel
-- Replaced: 0008_push_step_notify's two triggers on nrllm_step (a NOTIFY from every step's
-- INSERT serialised every boundary's commit cluster-wide; 0010 dropped them).


-- ==== nrllm_agents_notify_cancel: a run becoming cancelled, payload the run id, on nrllm_cancel.
-- The cancel watcher of every process executing runs listens there (live/interrupts.py).

-- section: 0003_cancel_notify
CREATE OR REPLACE FUNCTION nrllm_agents_notify_cancel() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('nrllm_cancel', NEW.id::text);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER nrllm_agents_notify_cancel
    AFTER UPDATE OF status ON nrllm_agents_agentrun
    FOR EACH ROW
    WHEN (NEW.status = 'cancelled' AND OLD.status IS DISTINCT FROM 'cancelled')
    EXECUTE FUNCTION nrllm_agents_notify_cancel();

-- section: 0003_cancel_notify.reverse
DROP TRIGGER IF EXISTS nrllm_agents_notify_cancel ON nrllm_agents_agentrun;
DROP FUNCTION IF EXISTS nrllm_agents_notify_cancel();


-- ==== nrllm_agents_notify_settled: a watched run settling (completed, failed,
-- waiting_for_approval) or its cancel acknowledged (stopped_at set), payload '<run id>:s', on
-- the run's own channel nrllm_run_<run id hex>, only while agentrun.watchers > 0: once per run,
-- not per step. The push hub listens there (live/push.py). Applying it also drops 0008's step
-- trigger; its reversal puts 0008's triggers back (the migration adds 0008's section after it).

-- section: 0010_targeted_push
DROP TRIGGER IF EXISTS nrllm_agents_notify_step ON nrllm_agents_agentrunevent;
DROP FUNCTION IF EXISTS nrllm_agents_notify_step();
DROP TRIGGER IF EXISTS nrllm_agents_notify_settled ON nrllm_agents_agentrun;

CREATE OR REPLACE FUNCTION nrllm_agents_notify_settled() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('nrllm_run_' || replace(NEW.id::text, '-', ''), NEW.id::text || ':s');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER nrllm_agents_notify_settled
    AFTER UPDATE OF status, stopped_at ON nrllm_agents_agentrun
    FOR EACH ROW
    WHEN (NEW.watchers > 0 AND (
          (NEW.status IN ('completed', 'failed', 'waiting_for_approval') AND OLD.status IS DISTINCT FROM NEW.status)
          OR (NEW.stopped_at IS NOT NULL AND OLD.stopped_at IS NULL)))
    EXECUTE FUNCTION nrllm_agents_notify_settled();

-- section: 0010_targeted_push.reverse
DROP TRIGGER IF EXISTS nrllm_agents_notify_settled ON nrllm_agents_agentrun;


-- ==== Replaced by 0010: a NOTIFY on nrllm_step from every step's INSERT ('<run id>:<sequence>')
-- and from a run settling ('<run id>:s'), for every run, watched or not.

-- section: 0008_push_step_notify
CREATE OR REPLACE FUNCTION nrllm_agents_notify_step() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('nrllm_step', NEW.run_id::text || ':' || NEW.sequence::text);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER nrllm_agents_notify_step
    AFTER INSERT ON nrllm_agents_agentrunevent
    FOR EACH ROW EXECUTE FUNCTION nrllm_agents_notify_step();

CREATE OR REPLACE FUNCTION nrllm_agents_notify_settled() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('nrllm_step', NEW.id::text || ':s');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER nrllm_agents_notify_settled
    AFTER UPDATE OF status ON nrllm_agents_agentrun
    FOR EACH ROW
    WHEN (NEW.status IN ('completed', 'failed', 'waiting_for_approval')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION nrllm_agents_notify_settled();

-- section: 0008_push_step_notify.reverse
DROP TRIGGER IF EXISTS nrllm_agents_notify_step ON nrllm_agents_agentrunevent;
DROP FUNCTION IF EXISTS nrllm_agents_notify_step();
DROP TRIGGER IF EXISTS nrllm_agents_notify_settled ON nrllm_agents_agentrun;
DROP FUNCTION IF EXISTS nrllm_agents_notify_settled();
