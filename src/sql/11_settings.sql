-- Reading wfe's settings (docs: operations.md "Settings").  The library
-- defines them, with their defaults, when it is loaded; SQL reads them
-- through wfe._setting and never writes a default again.

-- A wfe setting's value, its default when nobody set it.
CREATE FUNCTION wfe._setting(p_name text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- NB: load the library first (a no-op once loaded, e.g. preloaded).  Until
    -- it is loaded a wfe.* setting is a placeholder that any role may SET for
    -- its own session, and one nobody set has no value; loading it defines
    -- the real setting with its default (and discards a placeholder value of
    -- a superuser-only one, such as wfe.four_eyes, with a warning).
    -- SECURITY DEFINER: only a superuser may LOAD from $libdir.
    LOAD 'MODULE_PATHNAME';
    RETURN current_setting(p_name);
END
$$;
COMMENT ON FUNCTION wfe._setting(text) IS
'The value of a setting the wfe library defines (wfe.notify, wfe.track_threshold_bytes, wfe.four_eyes, ...), its default included: loads the library first.';
REVOKE ALL ON FUNCTION wfe._setting(text) FROM PUBLIC;
