-- The outbox's consumers (docs: delivery.md): the background worker's
-- publisher (src/bgw/publisher.c) and its lease, external relays, and the
-- event log's projection onto the outbox.

-- One publisher per database: whoever holds the lease publishes; its token
-- grows with every new holder and is checked when rows are marked, so a
-- publisher that lost the lease (a zombie incarnation) cannot mark anything.
CREATE TABLE wfe.publisher_lease (
    singleton    boolean PRIMARY KEY DEFAULT true CONSTRAINT publisher_lease_singleton CHECK (singleton),
    holder       text,
    token        bigint NOT NULL DEFAULT 0,
    heartbeat_at timestamptz,
    connected    boolean NOT NULL DEFAULT false,
    last_error   text
);
INSERT INTO wfe.publisher_lease DEFAULT VALUES;
COMMENT ON TABLE wfe.publisher_lease IS 'The publisher lease: holder, monotonic fencing token, liveness, broker connection state';
GRANT SELECT ON wfe.publisher_lease TO wfe_reader, wfe_operator;

-- Take or renew the lease: a new holder gets a new token.
CREATE FUNCTION wfe._publisher_lease(p_holder text, p_connected boolean, p_error text)
RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    UPDATE wfe.publisher_lease AS l
       SET token = CASE WHEN l.holder IS DISTINCT FROM p_holder THEN l.token + 1 ELSE l.token END,
           holder = p_holder, heartbeat_at = now(), connected = p_connected, last_error = p_error
     WHERE l.holder IS NULL OR l.holder = p_holder
        OR l.heartbeat_at < now() - interval '30 seconds'
        -- a holder whose process is gone (a restarted worker) is replaced at once
        OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity AS a
                        WHERE a.pid::text = substring(l.holder FROM '[0-9]+$')
                          AND a.backend_type = 'wfe worker')
    RETURNING l.token;
END;
COMMENT ON FUNCTION wfe._publisher_lease(text, boolean, text) IS
'Takes or renews the publisher lease; returns its fencing token, or NULL while another live publisher holds it.';
REVOKE ALL ON FUNCTION wfe._publisher_lease(text, boolean, text) FROM PUBLIC;

-- Claim a batch for the lease holder.  p_held: the rows the publisher still
-- holds (it claims the next batch while earlier ones are in flight or not
-- yet marked); any other row it claimed is left over from a batch whose
-- mark failed.
CREATE FUNCTION wfe._outbox_claim(p_holder text, p_token bigint, p_max int, p_held bigint[])
RETURNS TABLE (id bigint, kind text, exchange text, routing_key text, message_id uuid,
               run_id bigint, created_at timestamptz, headers text, body text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF NOT EXISTS (SELECT 1 FROM wfe.publisher_lease AS l WHERE l.holder = p_holder AND l.token = p_token) THEN
        RETURN;
    END IF;
    -- rows this publisher claimed and no longer holds (their mark failed)
    -- are pending again, and picked again below
    UPDATE wfe.outbox AS o SET state = 'pending', claimed_by = NULL, claimed_at = NULL
     WHERE o.state = 'claimed' AND o.claimed_by = p_holder AND o.id <> ALL (p_held);
    -- NB: pick along the pending index and update by primary key, so the
    -- claim costs the same however much published history the table holds
    RETURN QUERY
    WITH picked AS MATERIALIZED (
        SELECT o.id FROM wfe.outbox AS o
         WHERE o.state = 'pending' AND o.available_at <= now()
         ORDER BY o.available_at, o.id LIMIT p_max
           FOR UPDATE SKIP LOCKED
    )
    UPDATE wfe.outbox AS o
       SET state = 'claimed', claimed_by = p_holder, claimed_at = now(), attempts = o.attempts + 1
     WHERE o.id = ANY (ARRAY(SELECT picked.id FROM picked))
    RETURNING o.id, o.kind, o.exchange, o.routing_key, o.message_id, o.run_id, o.created_at,
              o.headers::text, o.body::text;
END
$$;
COMMENT ON FUNCTION wfe._outbox_claim(text, bigint, int, bigint[]) IS
'Publisher: claims up to p_max pending outbox rows (SKIP LOCKED, id order) while holding the lease; rows it claimed earlier and no longer holds (not in p_held) go back to pending first.';
REVOKE ALL ON FUNCTION wfe._outbox_claim(text, bigint, int, bigint[]) FROM PUBLIC;

-- The broker has these messages now: the rows p_by holds claimed among
-- p_ids become published, and the attempts of the dispatches among them
-- become dispatched if they still are queued at the same attempt and fence
-- (accept_task will start them).  One statement: the stages are found from
-- what the outbox UPDATE returns, by primary key; nothing is read twice,
-- and the published rows already in the outbox are never looked at.  (Only
-- stage rows are locked here, never the run: no lock-order cycle with
-- callbacks, which lock the run, then the stage.)  Returns the rows marked.
CREATE FUNCTION wfe._mark_published(p_ids bigint[], p_by text)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n int;
BEGIN
    WITH published AS (
        UPDATE wfe.outbox AS o
           SET state = 'published', published_at = now(), last_error = NULL
          FROM unnest(p_ids) AS p(id)
         WHERE o.id = p.id AND o.state = 'claimed' AND o.claimed_by = p_by
        RETURNING o.kind, o.run_id, o.stage, o.attempt, o.fence
    ), dispatched AS (
        UPDATE wfe.run_stages AS st
           SET state = 'dispatched'
          FROM published AS o
         WHERE o.kind = 'dispatch' AND st.run_id = o.run_id AND st.stage = o.stage
           AND st.attempt = o.attempt AND st.fence = o.fence AND st.state = 'queued'
    )
    SELECT count(*) INTO n FROM published;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._mark_published(bigint[], text) IS
'Marks the confirmed rows p_by holds claimed published, and moves the attempts of their dispatches from queued to dispatched.';
REVOKE ALL ON FUNCTION wfe._mark_published(bigint[], text) FROM PUBLIC;

-- Record what the broker confirmed, and what it did not.
CREATE FUNCTION wfe._outbox_mark(p_holder text, p_token bigint, p_published bigint[],
                                 p_failed bigint[], p_error text, p_unroutable bigint[])
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n int;
BEGIN
    -- fenced: a publisher that lost the lease marks nothing (its rows are
    -- claimed by a dead holder and go back to pending on repair)
    PERFORM 1 FROM wfe.publisher_lease AS l WHERE l.holder = p_holder AND l.token = p_token FOR SHARE;
    IF NOT FOUND THEN
        RAISE WARNING 'wfe publisher % lost its lease (token %): nothing marked', p_holder, p_token;
        RETURN 0;
    END IF;
    n := wfe._mark_published(p_published, p_holder);
    -- not confirmed: pending again after an exponential backoff
    IF cardinality(p_failed) > 0 THEN
        UPDATE wfe.outbox AS o
           SET state = 'pending', claimed_by = NULL, claimed_at = NULL, last_error = p_error,
               available_at = now() + make_interval(secs => least(60, 0.1 * power(2, least(o.attempts, 10))))
          FROM unnest(p_failed) AS p(id)
         WHERE o.id = p.id AND o.state = 'claimed' AND o.claimed_by = p_holder;
    END IF;
    IF cardinality(p_unroutable) > 0 THEN
        UPDATE wfe.outbox AS o
           SET state = 'pending', claimed_by = NULL, claimed_at = NULL,
               last_error = 'unroutable: no queue is bound for ' || o.exchange || ' ' || o.routing_key,
               available_at = now() + make_interval(secs => least(300, power(2, least(o.attempts, 8))))
          FROM unnest(p_unroutable) AS p(id)
         WHERE o.id = p.id AND o.state = 'claimed' AND o.claimed_by = p_holder;
        RAISE WARNING 'wfe publisher: % outbox rows were unroutable and stay pending (ids %)',
              cardinality(p_unroutable), p_unroutable;
    END IF;
    RETURN n;
END
$$;
COMMENT ON FUNCTION wfe._outbox_mark(text, bigint, bigint[], bigint[], text, bigint[]) IS
'Publisher: marks exactly the confirmed rows published; nacked, timed-out and unroutable rows go back to pending with a backoff.';
REVOKE ALL ON FUNCTION wfe._outbox_mark(text, bigint, bigint[], bigint[], text, bigint[]) FROM PUBLIC;

-- External relays (no preload): claim and acknowledge outbox rows.
-- A relay is a role like any other: it sees and acknowledges the outbox rows
-- of the tenants it acts for (wfe.my_tenants(): the tenants it is mapped
-- to, every tenant for a superuser or wfe_admin), and no other.  This is
-- that rule, for outbox_claim and outbox_ack both; p_tenants is
-- wfe.my_tenants(), read once per call.
CREATE FUNCTION wfe._relay_sees(p_tenant text, p_tenants text[])
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN p_tenants IS NULL OR p_tenant OPERATOR(pg_catalog.=) ANY (p_tenants);
COMMENT ON FUNCTION wfe._relay_sees(text, text[]) IS
'Whether an external relay acting for p_tenants (wfe.my_tenants(); NULL: every tenant) may claim and acknowledge an outbox row of p_tenant.';
REVOKE ALL ON FUNCTION wfe._relay_sees(text, text[]) FROM PUBLIC;

CREATE FUNCTION wfe.outbox_claim(max int, relay text)
RETURNS SETOF wfe.outbox
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_tenants text[] := wfe.my_tenants();
BEGIN
    IF outbox_claim.max IS NULL OR outbox_claim.max < 1 OR outbox_claim.relay IS NULL
       OR outbox_claim.relay = '' THEN
        RAISE EXCEPTION 'max must be positive and relay must name the relay'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- rows a relay claimed and never acknowledged for 5 minutes are claimable again
    RETURN QUERY
    WITH picked AS (
        SELECT o.id FROM wfe.outbox AS o
         WHERE ((o.state = 'pending' AND o.available_at <= now())
                OR (o.state = 'claimed' AND o.claimed_at < now() - interval '5 minutes'
                    AND o.claimed_by NOT LIKE 'wfe worker%'))
           AND wfe._relay_sees(o.tenant, v_tenants)
         ORDER BY o.id LIMIT outbox_claim.max
           FOR UPDATE SKIP LOCKED
    )
    UPDATE wfe.outbox AS o
       SET state = 'claimed', claimed_by = outbox_claim.relay, claimed_at = now(), attempts = o.attempts + 1
      FROM picked WHERE o.id = picked.id
    RETURNING o.*;
END
$$;
COMMENT ON FUNCTION wfe.outbox_claim(int, text) IS
'External relay: claims up to max pending outbox rows of the tenants the caller acts for (SKIP LOCKED, id order); acknowledge them with wfe.outbox_ack.';
REVOKE ALL ON FUNCTION wfe.outbox_claim(int, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.outbox_claim(int, text) TO wfe_admin, wfe_operator;

CREATE FUNCTION wfe.outbox_ack(ids bigint[], relay text)
RETURNS int
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_tenants text[] := wfe.my_tenants();
BEGIN
    IF outbox_ack.ids IS NULL OR outbox_ack.relay IS NULL THEN
        RAISE EXCEPTION 'ids and relay must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- another tenant's row is one this relay does not hold: not marked, not counted
    RETURN wfe._mark_published(ARRAY(SELECT o.id FROM wfe.outbox AS o
                                      WHERE o.id = ANY (outbox_ack.ids)
                                        AND wfe._relay_sees(o.tenant, v_tenants)),
                               outbox_ack.relay);
END
$$;
COMMENT ON FUNCTION wfe.outbox_ack(bigint[], text) IS
'External relay: marks the rows it claimed and published as published; returns how many (rows it no longer holds, or of tenants it does not act for, are not counted).';
REVOKE ALL ON FUNCTION wfe.outbox_ack(bigint[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wfe.outbox_ack(bigint[], text) TO wfe_admin, wfe_operator;

-- The event log's projection on wfe.events, while wfe.publish_events is on
-- (src/pg/event_projection.c).  The WHEN clause is the gate: a row it turns
-- away queues no after-trigger event, so with the setting off an event
-- costs one comparison.
CREATE FUNCTION wfe._project_event()
RETURNS trigger AS 'MODULE_PATHNAME', 'wfe_project_event'
LANGUAGE C;
COMMENT ON FUNCTION wfe._project_event() IS 'Trigger: copies an event row to the outbox for the wfe.events exchange.';
REVOKE ALL ON FUNCTION wfe._project_event() FROM PUBLIC;
CREATE TRIGGER events_projection
    AFTER INSERT ON wfe.events
    FOR EACH ROW WHEN (current_setting('wfe.publish_events', true) = 'on')
    EXECUTE FUNCTION wfe._project_event();
