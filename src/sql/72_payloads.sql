-- The large track (docs: delivery.md): a dispatch whose input is over
-- wfe.track_threshold_bytes carries a reference (wfe._dispatch writes it);
-- the input is stored once here, and a worker fetches it by that reference.

-- Inputs over wfe.track_threshold_bytes, stored once by their SHA-256.
CREATE TABLE wfe.payloads (
    key        text PRIMARY KEY CONSTRAINT payloads_key CHECK (key ~ '^sha256:[0-9a-f]{64}$'),
    tenant     text NOT NULL,
    bytes      int NOT NULL,
    body       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE wfe.payloads IS 'Large inputs (the large track), stored once under sha256:<hex> of their JSON text';

CREATE FUNCTION wfe.fetch_payload(ref jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    p wfe.payloads;
BEGIN
    IF ref ->> 'key' IS NULL OR ref ->> 'sha256' IS NULL
       OR ref ->> 'key' IS DISTINCT FROM 'sha256:' || (ref ->> 'sha256') THEN
        RAISE EXCEPTION 'payload reference is malformed or its hash does not match its key'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('key %s, sha256 %s', ref ->> 'key', ref ->> 'sha256');
    END IF;
    -- the key (a SHA-256) is only learnt from an envelope; and only a role
    -- that serves some queue may ask
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.oid = wfe._caller())
       AND NOT pg_catalog.pg_has_role(wfe._caller(), 'wfe_admin', 'USAGE')
       AND NOT EXISTS (SELECT 1 FROM wfe.queue_grants AS g
                        WHERE pg_catalog.pg_has_role(wfe._caller(), g.role, 'USAGE')) THEN
        RAISE EXCEPTION 'role "%" serves no queue and may not fetch payloads', wfe._caller()
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An administrator grants a queue with wfe.grant_queue(role, queue).';
    END IF;
    SELECT * INTO p FROM wfe.payloads AS x WHERE x.key = ref ->> 'key';
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
'The input a large-track envelope refers to, after checking its SHA-256 against the reference.';
REVOKE ALL ON FUNCTION wfe.fetch_payload(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.fetch_payload(jsonb) TO wfe_worker;
