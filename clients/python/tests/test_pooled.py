"""A poll worker with pooled=True (behind a transaction pooler): no LISTEN, the poll interval instead.

TAP 033 runs it through a real pgbouncer; here, straight on the server, what pooled changes."""
from __future__ import annotations

import time

import psycopg

import wfe
from conftest import Flow, Workers, one, stage, wait_until


def state(db: psycopg.Connection, run_id: int) -> str:
    return one(db, "SELECT state FROM wfe.runs WHERE run_id = %s", (run_id,))


def test_a_pooled_worker_does_not_listen(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db)
    workers.start(flow.env(POLL_INTERVAL_S=600, POOLED=1))
    time.sleep(1.5)  # the worker has claimed, found nothing, and waits
    run = wfe.submit(db, flow.workflow, {"spec": {}}).run_id
    time.sleep(2)
    assert stage(db, run)["state"] == "queued", "no notification woke it: " + workers.log()
    assert one(db, "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN%%'") == 0


def test_a_pooled_worker_claims_every_poll_interval(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db)
    workers.start(flow.env(POLL_INTERVAL_S=0.3, POOLED=1, CONCURRENCY=1))
    # one at a time, each found by a claim after empty ones: the interval alone drives it
    runs = []
    for i in range(8):
        runs.append(wfe.submit(db, flow.workflow, {"spec": {"i": i}}).run_id)
        assert wait_until(lambda: state(db, runs[-1]) == "completed", 10), workers.log()
    assert "prepared" not in workers.log()
