-- History partitions (docs: scaling.md "History partitions").  wfe.events
-- is partitioned by day (UTC): events_pYYYYMMDD holds the events of that
-- day, events_default whatever no day partition covers.  The background
-- worker, in its retention pass (wfe._retention), keeps the coming days'
-- partitions made ahead, moves the rows the default partition holds into
-- day partitions, and drops the day partitions retention has passed.
--
-- The day partitions are data, not schema: the worker makes them, they are
-- no members of the extension (pg_dump dumps them with their rows, DROP
-- EXTENSION drops them with wfe.events).  Each DDL here waits at most
-- lock_timeout for its lock; one that gives up is tried again on the next
-- pass, and the event path never waits on more than that.

-- Make the partition of day p_day (UTC) unless it exists, moving the rows
-- of that day the default partition holds into it.  Returns 1 if made.
CREATE FUNCTION wfe._history_make_day(p_day date)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '200ms'
AS $$
DECLARE
    v_name text := 'events_p' || to_char(p_day, 'YYYYMMDD');
    v_lo   timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
    v_hi   timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF to_regclass('wfe.' || v_name) IS NOT NULL THEN
        RETURN 0;
    END IF;
    BEGIN
        -- An insert chooses its partition before it locks it: one that chose
        -- the default partition before the ATTACH and locks it after fails
        -- its partition check ("violates partition constraint").  So while
        -- rows of the day may be arriving (yesterday's from transactions
        -- begun before midnight, today's, or days made ahead), inserts wait
        -- at wfe.events for this short transaction and then route afresh.
        -- Older days (rows moved after an upgrade) need no such wait.
        IF p_day >= (now() AT TIME ZONE 'UTC')::date - 1 THEN
            LOCK TABLE wfe.events IN SHARE ROW EXCLUSIVE MODE;
        END IF;
        -- ATTACH takes this lock to check the default partition holds none
        -- of the day's rows: taken first, no row of the day lands there
        -- while they move (inserts of other days go on)
        LOCK TABLE wfe.events_default IN ACCESS EXCLUSIVE MODE;
        -- made apart and attached: CREATE TABLE ... PARTITION OF would lock
        -- wfe.events itself; the CHECK spares ATTACH a scan of the new table
        EXECUTE format('CREATE TABLE wfe.%I (LIKE wfe.events INCLUDING DEFAULTS,'
                       ' CONSTRAINT %I CHECK (at >= %L AND at < %L))',
                       v_name, v_name || '_day', v_lo, v_hi);
        EXECUTE format('WITH moved AS (DELETE FROM wfe.events_default AS e WHERE e.at >= %L AND e.at < %L'
                       ' RETURNING e.*) INSERT INTO wfe.%I SELECT * FROM moved',
                       v_lo, v_hi, v_name);
        EXECUTE format('ALTER TABLE wfe.events ATTACH PARTITION wfe.%I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_lo, v_hi);
    EXCEPTION WHEN lock_not_available THEN
        RETURN 0;                   -- busy: the next pass tries again
    END;
    RETURN 1;
END
$$;
COMMENT ON FUNCTION wfe._history_make_day(date) IS
'Makes the day partition of wfe.events for p_day (UTC) unless it exists, moving that day''s rows out of the default partition; 1 if made, 0 if it existed or a lock was busy.';
REVOKE ALL ON FUNCTION wfe._history_make_day(date) FROM PUBLIC;

-- The day partitions of wfe.events, oldest first, with the time each ends.
CREATE FUNCTION wfe._history_days(OUT name text, OUT day date, OUT ends timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.relname::text, to_date(substr(c.relname, 9), 'YYYYMMDD'),
           (to_date(substr(c.relname, 9), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC'
      FROM pg_inherits AS i
      JOIN pg_class AS c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'wfe.events'::regclass AND c.relname ~ '^events_p[0-9]{8}$'
     ORDER BY c.relname
$$;
COMMENT ON FUNCTION wfe._history_days() IS
'The day partitions of wfe.events (events_pYYYYMMDD), oldest first, with the time each ends.';
REVOKE ALL ON FUNCTION wfe._history_days() FROM PUBLIC;

-- The worker's pass over the partitions: today's and the next two days'
-- made ahead, one day moved out of the default partition, and the day
-- partitions every event of which is past p_cutoff dropped.
CREATE FUNCTION wfe._history_maintain(p_cutoff timestamptz)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '200ms'
AS $$
DECLARE
    v_today date := (now() AT TIME ZONE 'UTC')::date;
    v_keep  timestamptz;
    v_run   bigint;
    v_at    timestamptz;
    v_kept  boolean;
    p       record;
    n       int := 0;
BEGIN
    FOR i IN 0 .. 2 LOOP
        n := n + wfe._history_make_day(v_today + i);
    END LOOP;
    -- rows the default partition holds (after an upgrade, or a time without
    -- the worker): one day of them a pass
    SELECT e.at INTO v_at FROM wfe.events_default AS e LIMIT 1;
    IF FOUND THEN
        n := n + wfe._history_make_day((v_at AT TIME ZONE 'UTC')::date);
    END IF;
    -- A day partition goes when it ended before the cutoff and no run that
    -- is still kept can have an event in it.  A run's events are written
    -- at or after its submission, and retention removes runs oldest first:
    -- what the oldest run left (its run_id, so the primary key answers)
    -- was submitted after holds no event of a kept run.  The hour allows
    -- for transactions that began before a submission they then wrote
    -- about, and run ids drawn out of submission order.
    SELECT r.run_id, r.submitted_at - interval '1 hour' INTO v_run, v_at
      FROM wfe.runs AS r ORDER BY r.run_id LIMIT 1;
    v_keep := least(p_cutoff, v_at);
    FOR p IN SELECT d.name, d.ends FROM wfe._history_days() AS d LOOP
        EXIT WHEN p.ends > v_keep;
        -- and none of its events names a run still kept, checked: a run
        -- that old cannot have any, so this finds (by the partition's
        -- events_run index, from the oldest run's id up) only events
        -- written with a time before their run's, or about run ids that
        -- were never submitted
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM wfe.%I AS e WHERE e.run_id >= $1'
                       ' AND EXISTS (SELECT 1 FROM wfe.runs AS r WHERE r.run_id = e.run_id))', p.name)
           INTO v_kept USING v_run;
        CONTINUE WHEN v_kept;
        BEGIN
            EXECUTE format('DROP TABLE wfe.%I', p.name);
        EXCEPTION WHEN lock_not_available THEN
            EXIT;                   -- busy: the next pass tries again
        END;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._history_maintain(timestamptz) IS
'The worker''s pass over wfe.events'' day partitions: makes today''s and the next two days'', moves one day out of the default partition, drops the day partitions that ended before p_cutoff and before the oldest run kept was submitted, and name no run kept.  Returns the partitions made or dropped.';
REVOKE ALL ON FUNCTION wfe._history_maintain(timestamptz) FROM PUBLIC;
