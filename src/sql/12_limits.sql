-- Admission limits at the door (src/pg/limits.c; docs: operations.md
-- "Admission and backpressure").  Every function that takes JSON or a
-- name from a caller measures it with these before building anything from
-- it: 54000 (program_limit_exceeded) naming the limit -- wfe.max_payload_bytes,
-- wfe.max_json_depth, wfe.max_name_bytes -- or 22023 for a control character.

CREATE FUNCTION wfe._admit(value jsonb, what text)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_admit' LANGUAGE C STABLE;
COMMENT ON FUNCTION wfe._admit(jsonb, text) IS
'Raises 54000 if value (named what in the message) is larger than wfe.max_payload_bytes or deeper than wfe.max_json_depth.';
REVOKE ALL ON FUNCTION wfe._admit(jsonb, text) FROM PUBLIC;

CREATE FUNCTION wfe._admit_name(value text, what text)
RETURNS void AS 'MODULE_PATHNAME', 'wfe_admit_name_sql' LANGUAGE C STABLE;
COMMENT ON FUNCTION wfe._admit_name(text, text) IS
'Raises 54000 if value is longer than wfe.max_name_bytes, 22023 if it holds a control character.';
REVOKE ALL ON FUNCTION wfe._admit_name(text, text) FROM PUBLIC;
