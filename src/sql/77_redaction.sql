-- Redaction (docs: operations.md "Redaction"): the keys listed in
-- wfe.redact_keys never reach telemetry.  The rule is one C function
-- (src/pg/redact.c); the event log redacts as it is written, so the stored
-- rows, the projection on the outbox and every reader see the same detail;
-- wfe.report and wfe.run_spans redact the run data they show.

CREATE FUNCTION wfe._redact(p_doc jsonb)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'wfe_redact_sql'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION wfe._redact(jsonb) IS
'The document with the value of every key listed in wfe.redact_keys, at any depth, replaced by "[redacted]".';
REVOKE ALL ON FUNCTION wfe._redact(jsonb) FROM PUBLIC;

CREATE FUNCTION wfe._redact_trigger()
RETURNS trigger
AS 'MODULE_PATHNAME', 'wfe_redact_trigger'
LANGUAGE C;
COMMENT ON FUNCTION wfe._redact_trigger() IS
'BEFORE INSERT row trigger: redacts (wfe._redact) the jsonb column named by its argument.';
REVOKE ALL ON FUNCTION wfe._redact_trigger() FROM PUBLIC;

-- BEFORE triggers run before the AFTER one that projects the event onto
-- the outbox, which so copies the redacted row.
CREATE TRIGGER events_redact
    BEFORE INSERT ON wfe.events
    FOR EACH ROW EXECUTE FUNCTION wfe._redact_trigger('detail');
CREATE TRIGGER unauthenticated_callbacks_redact
    BEFORE INSERT ON wfe.unauthenticated_callbacks
    FOR EACH ROW EXECUTE FUNCTION wfe._redact_trigger('detail');
