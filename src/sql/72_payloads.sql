-- The large track (docs: delivery.md): a dispatch whose input is over
-- wfe.track_threshold_bytes carries a reference (wfe._dispatch writes it);
-- the input is stored once here, and a worker fetches it by that reference.

-- Inputs over wfe.track_threshold_bytes, stored once per stage by their
-- SHA-256.  A payload belongs to the stage that dispatched it: fetched only
-- by a holder of that stage's attempt (wfe.fetch_payload), and deleted with
-- its run (retention).
CREATE TABLE wfe.payloads (
    key        text NOT NULL CONSTRAINT payloads_key CHECK (key ~ '^sha256:[0-9a-f]{64}$'),
    tenant     text NOT NULL,
    bytes      int NOT NULL,
    body       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    run_id     bigint NOT NULL REFERENCES wfe.runs ON DELETE CASCADE,
    stage      text NOT NULL,
    CONSTRAINT payloads_pkey PRIMARY KEY (run_id, stage, key)
);
COMMENT ON TABLE wfe.payloads IS
'Large inputs (the large track) of the stages that dispatched them, under sha256:<hex> of their JSON text; deleted with their runs';

-- A large-track envelope's input.  The reference names the attempt that
-- dispatched it (_dispatch), and only a caller who holds that attempt --
-- who may serve its queue and knows its fence, while it is queued,
-- dispatched or running -- gets the payload: a hash guessed from a
-- document is no way into another queue's or tenant's inputs.  Whatever
-- the caller cannot show is answered as a payload that does not exist.
CREATE FUNCTION wfe.fetch_payload(ref jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    s wfe.run_stages;
    p wfe.payloads;
BEGIN
    IF ref ->> 'key' IS NULL OR ref ->> 'sha256' IS NULL
       OR ref ->> 'key' IS DISTINCT FROM 'sha256:' || (ref ->> 'sha256') THEN
        RAISE EXCEPTION 'payload reference is malformed or its hash does not match its key'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('key %s, sha256 %s', left(ref ->> 'key', 80), left(ref ->> 'sha256', 80));
    END IF;
    IF coalesce(jsonb_typeof(ref -> 'run_id') = 'number' AND jsonb_typeof(ref -> 'stage') = 'string'
                AND jsonb_typeof(ref -> 'attempt') = 'number'
                AND (ref ->> 'run_id') ~ '^[0-9]{1,18}$' AND (ref ->> 'attempt') ~ '^[0-9]{1,9}$'
                AND (ref ->> 'fence') ~ '^-?[0-9]{1,18}$', false) IS NOT TRUE THEN
        RAISE EXCEPTION 'payload reference names no attempt'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass the payload_ref of a dispatch message as it is: it carries run_id, stage, attempt and fence (messages published before wfe 0.3.0 do not; their attempts are retried with new ones).';
    END IF;
    SELECT * INTO s FROM wfe.run_stages AS st
     WHERE st.run_id = (ref ->> 'run_id')::bigint AND st.stage = ref ->> 'stage';
    -- who may fetch: the callbacks' rule (src/pg/grants.c), then the attempt itself
    IF NOT FOUND
       OR NOT wfe._may_call_back(s.queue, s.tenant, s.handler IS NOT NULL, s.run_id, s.stage, 'fetch payloads of')
       OR s.attempt <> (ref ->> 'attempt')::int OR s.fence <> (ref ->> 'fence')::bigint
       OR s.state NOT IN ('queued', 'dispatched', 'running') THEN
        RAISE EXCEPTION 'payload % does not exist', ref ->> 'key' USING ERRCODE = 'undefined_object';
    END IF;
    SELECT * INTO p FROM wfe.payloads AS x
     WHERE x.run_id = s.run_id AND x.stage = s.stage AND x.key = ref ->> 'key';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'payload % does not exist', ref ->> 'key' USING ERRCODE = 'undefined_object';
    END IF;
    -- verify the content against its name: a tampered row is refused
    IF 'sha256:' || encode(sha256(convert_to(p.body::text, 'UTF8')), 'hex') <> p.key THEN
        RAISE EXCEPTION 'payload % failed its SHA-256 check', p.key USING ERRCODE = 'data_corrupted';
    END IF;
    RETURN p.body;
END
$$;
COMMENT ON FUNCTION wfe.fetch_payload(jsonb) IS
'The input a large-track envelope refers to, for a holder of the attempt the reference names, after checking its SHA-256 against the reference.';
REVOKE ALL ON FUNCTION wfe.fetch_payload(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.fetch_payload(jsonb) TO wfe_worker;
