-- Reading wfe's settings (docs: operations.md "Settings").  The library
-- defines them, with their defaults, when it is loaded; SQL reads them
-- through wfe._setting and never writes a default again.

-- Load the library, then read the setting.
CREATE FUNCTION wfe._load_setting(p_name text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    LOAD 'MODULE_PATHNAME';         -- SECURITY DEFINER: only a superuser may LOAD from $libdir
    RETURN current_setting(p_name);
END
$$;
COMMENT ON FUNCTION wfe._load_setting(text) IS
'Loads the wfe library (which defines its settings, with their defaults), then returns the setting''s value.';
REVOKE ALL ON FUNCTION wfe._load_setting(text) FROM PUBLIC;

-- A wfe setting's value, its default when nobody set it.  Until the library
-- is loaded a setting nobody set has no value: only then is it loaded (LOAD
-- looks the file up again on every call, and this is on the release path;
-- plain SQL, so the planner inlines it into its callers).  NB: a value a
-- role SET on a setting not yet defined (a placeholder) is its own
-- session's; a check that must not trust it (wfe._four_eyes) loads the
-- library itself.
CREATE FUNCTION wfe._setting(p_name text)
RETURNS text
LANGUAGE sql VOLATILE
RETURN coalesce(current_setting(p_name, true), wfe._load_setting(p_name));
COMMENT ON FUNCTION wfe._setting(text) IS
'The value of a setting the wfe library defines (wfe.notify, wfe.track_threshold_bytes, ...), its default included: loads the library when the setting is not defined yet.';
REVOKE ALL ON FUNCTION wfe._setting(text) FROM PUBLIC;
