-- Signed callbacks through an HTTP gateway (docs/operations.md "Signed
-- callbacks"): the keys, the callback_ids seen, and wfe.callback.

-- The gateways' HMAC keys.  A key_id may have several rows (secrets) with
-- overlapping validity: that is a rotation.  wfe_admin reads and writes
-- this table directly; no one else may read it.
CREATE TABLE wfe.callback_keys (
    key_id      text NOT NULL
                CHECK (key_id ~ '^[A-Za-z0-9._:-]{1,64}$'),
    secret      bytea NOT NULL
                CHECK (octet_length(secret) BETWEEN 16 AND 1024),
    valid_from  timestamptz NOT NULL DEFAULT now(),
    valid_until timestamptz
                CHECK (valid_until IS NULL OR valid_until > valid_from),
    PRIMARY KEY (key_id, valid_from)
);
COMMENT ON TABLE wfe.callback_keys IS
'HMAC-SHA256 secrets of the gateways that sign callbacks: a secret counts from valid_from until valid_until (NULL: no end). Several rows of one key_id: a rotation.';
GRANT SELECT, INSERT, UPDATE, DELETE ON wfe.callback_keys TO wfe_admin;

-- The callback_ids of accepted signed callbacks, kept for the tolerance
-- window; wfe.callback itself removes the ones that left it.
CREATE TABLE wfe.callback_ids (
    callback_id text PRIMARY KEY,
    signed_at   timestamptz NOT NULL,
    key_id      text NOT NULL
);
CREATE INDEX callback_ids_signed_at ON wfe.callback_ids (signed_at);
COMMENT ON TABLE wfe.callback_ids IS
'callback_ids of accepted signed callbacks within wfe.callback_tolerance_s of their timestamp: a second body with one answers replayed.';

-- Bodies whose signature did not authenticate them: anyone's text, kept
-- apart from every tenant's events (a tenant's reader must not see what a
-- stranger wrote about its run ids).  The operators and wfe_admin read
-- them; retention removes them (wfe._retention).
CREATE TABLE wfe.unauthenticated_callbacks (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    caller   name,                  -- the role that called (SET ROLE included); NULL: recorded before 0.3.0
    run_id   bigint,
    stage    text,
    attempt  int,
    detail   jsonb NOT NULL,
    fence    bigint
);
CREATE INDEX unauthenticated_callbacks_at ON wfe.unauthenticated_callbacks (at);
COMMENT ON TABLE wfe.unauthenticated_callbacks IS
'Signed callbacks whose signature did not authenticate them (wfe.callback answered unauthenticated): the login that sent them, what they claimed (run, stage, attempt; callback, callback_id, key_id, timestamp and why in detail). Readable by wfe_operator and wfe_admin, never a tenant''s event.';
-- nobody's tenant's: the operators see them
GRANT SELECT ON wfe.unauthenticated_callbacks TO wfe_admin, wfe_operator;

CREATE FUNCTION wfe.callback(body text, signature text)
RETURNS text
AS 'MODULE_PATHNAME', 'wfe_callback'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION wfe.callback(text, text) IS
'A worker''s report signed by its gateway: the gate''s outcome word when authentic; otherwise unauthenticated (recorded in wfe.unauthenticated_callbacks), expired or replayed (recorded as events of the run).';
REVOKE ALL ON FUNCTION wfe.callback(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.callback(text, text) TO wfe_worker;

-- The keys are configuration: a dump carries them (and so their secrets).
SELECT pg_catalog.pg_extension_config_dump('wfe.callback_keys', '');
-- What was refused is history, like the events.
SELECT pg_catalog.pg_extension_config_dump('wfe.unauthenticated_callbacks', '');
SELECT pg_catalog.pg_extension_config_dump('wfe.unauthenticated_callbacks_id_seq', '');
