-- The event projection (issue 24 item 1): wfe._project_event, the trigger
-- that copies event rows to the outbox while wfe.publish_events is on, is
-- C now (src/pg/event_projection.c).  Every outbox row it writes is
-- compared with what 0.2.0's PL/pgSQL body (copied below, writing to a
-- table of its own, fired by the same inserts) wrote for the same event
-- row: each column, and the body byte for byte (jsonb_send), over odd rows
-- (NULL detail, run, stage and attempt; escapes, unicode, a TOASTed detail,
-- JSON null, infinite and ancient times) under odd DateStyle and TimeZone
-- settings: "at" is written in the session's TimeZone, as it always was.
-- In a database of its own: the events it writes would shift the ids the
-- tests after it print.
SET client_min_messages = warning;
DROP DATABASE IF EXISTS wfe_projection;
\set regress_db :DBNAME
CREATE DATABASE wfe_projection;
\c wfe_projection
CREATE EXTENSION wfe;
RESET client_min_messages;
\set VERBOSITY terse

-- 0.2.0's wfe._project_event (sql/wfe--0.2.0.sql), writing to public.ref_outbox
CREATE TABLE public.ref_outbox (tenant text, run_id bigint, stage text, attempt int, kind text,
                                exchange text, routing_key text, message_id uuid, body jsonb);
CREATE FUNCTION public.project_event_020()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO public.ref_outbox (tenant, run_id, stage, attempt, kind, exchange, routing_key, message_id, body)
    VALUES (NEW.tenant, NEW.run_id, NEW.stage, NEW.attempt, 'event', 'wfe.events', NEW.type,
            md5('event:' || NEW.event_id)::uuid,
            jsonb_build_object('event_id', NEW.event_id, 'run_id', NEW.run_id, 'tenant', NEW.tenant,
                               'stage', NEW.stage, 'attempt', NEW.attempt, 'type', NEW.type,
                               'at', NEW.at, 'detail', NEW.detail));
    PERFORM wfe._wake(now());
    RETURN NULL;
END
$$;
CREATE TRIGGER ref_projection AFTER INSERT ON wfe.events
    FOR EACH ROW EXECUTE FUNCTION public.project_event_020();

-- the odd rows, inserted once per setting below
CREATE FUNCTION public.insert_odd_events(p_setting text) RETURNS void LANGUAGE sql AS $$
INSERT INTO wfe.events (run_id, tenant, stage, attempt, type, at, detail) VALUES
    (1, 'default', 'a', 1, 'stage.completed', '2026-12-02 15:31:12.123456+00', '{"worker_id": "w"}'),
    (NULL, 'default', NULL, NULL, 'callback.unknown', '2026-12-02 15:31:12+00', NULL),
    (2, 'tenant "quoted" \ back', 'stage\with"escapes', 0, 'stage.failed', '2026-03-29 01:30:00.5+00',
     '{"error": "line1\nline2\t\u0001 \"q\" \\ /", "</script>": "\u2028"}'),
    (3, 'tenant-ünïcödé', 'étape-🚀', 2147483647, 'stage.released', '2026-10-25 00:59:59.999999+00',
     '{"msg": "日本語 🚀 \u00e9", "n": 1.50, "big": 12345678901234567890, "neg": -0, "e": 1e-7,
       "nested": {"b": [1, null, true], "a": {}}}'),
    (9223372036854775807, 'default', 'a', -1, 'x.y.z', 'infinity', '{}'),
    (4, 'default', 'a', 1, 'run.submitted', '-infinity', '[]'),
    (5, 'default', 'a', 1, 'run.completed', '0044-03-15 12:00:00+00 BC', '"a string"'),
    (6, 'default', 'a', 1, 'run.failed', '1999-12-31 23:59:59.000001+00', 'null'),
    (7, 'default', 'a', 1, 'stage.claimed', '2026-12-02 15:31:12+00',
     (SELECT jsonb_build_object('big', string_agg(md5(i::text), ''), 'setting', p_setting)
        FROM generate_series(1, 2000) AS i));
$$;

SET wfe.publish_events = on;
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, MDY';
SELECT public.insert_odd_events('UTC ISO');
SET TimeZone = 'America/St_Johns';
SET DateStyle = 'SQL, DMY';
SELECT public.insert_odd_events('St_Johns SQL');
SET TimeZone = 'Asia/Kathmandu';
SET DateStyle = 'German';
SELECT public.insert_odd_events('Kathmandu German');
SET TimeZone = 'PST8PDT';
SET DateStyle = 'Postgres, YMD';
SET IntervalStyle = 'sql_standard';
SELECT public.insert_odd_events('PST8PDT Postgres');
RESET TimeZone;
RESET DateStyle;
RESET IntervalStyle;

-- the large detail really was stored out of line
SELECT pg_relation_size(c.reltoastrelid) > 0 AS toasted
  FROM pg_class AS c WHERE c.oid = 'wfe.events_default'::regclass;

-- each event has one outbox row and one reference row, and they are the same
SELECT count(*) AS events, count(o.message_id) AS projected, count(r.message_id) AS referenced,
       count(*) FILTER (WHERE jsonb_send(o.body) = jsonb_send(r.body)) AS same_body,
       count(*) FILTER (WHERE (o.tenant, o.run_id, o.stage, o.attempt, o.kind, o.exchange, o.routing_key)
                              IS NOT DISTINCT FROM
                              (r.tenant, r.run_id, r.stage, r.attempt, r.kind, r.exchange, r.routing_key))
         AS same_columns,
       count(*) FILTER (WHERE o.fence IS NULL AND o.headers = '{}' AND o.state = 'pending'
                          AND o.attempts = 0 AND o.available_at = o.created_at) AS as_before
  FROM wfe.events AS e
  LEFT JOIN wfe.outbox AS o ON o.kind = 'event' AND o.message_id = md5('event:' || e.event_id)::uuid
  LEFT JOIN public.ref_outbox AS r ON r.message_id = md5('event:' || e.event_id)::uuid;
-- what a consumer sees of the times, per setting (the session's TimeZone, ISO 8601 whatever DateStyle)
SELECT o.body ->> 'at' AS at, o.body -> 'stage' AS stage
  FROM wfe.outbox AS o
 WHERE o.run_id IN (1, 2, 5) ORDER BY o.id;
SELECT (o.body -> 'detail') - 'big' AS detail_but_big, o.body ->> 'at' AS at
  FROM wfe.outbox AS o WHERE o.run_id = 7 ORDER BY o.id;
SELECT o.body FROM wfe.outbox AS o WHERE o.run_id IN (2, 3) ORDER BY o.id LIMIT 2;

-- the gate: with the setting off, the trigger does not fire
SET wfe.publish_events = off;
SELECT count(*) AS outbox_before FROM wfe.outbox;
SELECT public.insert_odd_events('off');
SELECT count(*) AS outbox_after FROM wfe.outbox;
SELECT count(*) AS reference_rows FROM public.ref_outbox;

-- fired any other way than AFTER INSERT FOR EACH ROW: refused (39P01), nothing written
SET wfe.publish_events = on;
CREATE TEMP TABLE not_events (LIKE wfe.events INCLUDING DEFAULTS INCLUDING IDENTITY);
CREATE TRIGGER before_insert BEFORE INSERT ON not_events FOR EACH ROW EXECUTE FUNCTION wfe._project_event();
INSERT INTO not_events (run_id, tenant, type) VALUES (1, 'default', 'x');
DROP TRIGGER before_insert ON not_events;
CREATE TRIGGER per_statement AFTER INSERT ON not_events FOR EACH STATEMENT EXECUTE FUNCTION wfe._project_event();
INSERT INTO not_events (run_id, tenant, type) VALUES (1, 'default', 'x');
SELECT count(*) AS outbox_unchanged FROM wfe.outbox;
-- nor as a plain call
SELECT wfe._project_event();
-- it is C, and nobody but its owner may call it
SELECT l.lanname, p.proconfig, has_function_privilege('public', p.oid, 'EXECUTE') AS public_may
  FROM pg_proc AS p JOIN pg_language AS l ON l.oid = p.prolang
 WHERE p.oid = 'wfe._project_event'::regproc;

\c :regress_db
SET client_min_messages = warning;
DROP DATABASE wfe_projection;
