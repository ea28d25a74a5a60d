"""The broker worker against the real server and RabbitMQ: handshake, acks, redeliveries, dead letters,
cancellation, the large track, SIGTERM and a killed consumer."""
from __future__ import annotations

import signal
import time
from typing import Any, Iterator

import pika
import psycopg
import pytest

import wfe
from conftest import AMQP, Flow, Workers, events, needs_broker, one, stage, wait_until

pytestmark = needs_broker


@pytest.fixture
def amqp() -> Iterator[Any]:
    conn = pika.BlockingConnection(pika.URLParameters(AMQP))
    yield conn.channel()
    conn.close()


def ready(ch: Any, queue: str) -> int:
    """Messages ready plus unacknowledged? RabbitMQ's passive declare counts the ready ones."""
    return ch.queue_declare(queue, passive=True).method.message_count


def state(db: psycopg.Connection, run_id: int) -> str:
    return one(db, "SELECT state FROM wfe.runs WHERE run_id = %s", (run_id,))


def published(db: psycopg.Connection, run_id: int) -> bool:
    return one(db, "SELECT bool_and(state = 'published') FROM wfe.outbox WHERE run_id = %s AND kind = 'dispatch'",
               (run_id,)) is True


def topology(db: psycopg.Connection, ch: Any, flow: Flow) -> None:
    """Wait until the publisher declared the queue's topology (it does so when it publishes to it),
    and the test's worker (already started) ran the probe."""
    probe = wfe.submit(db, flow.workflow, {"spec": {"probe": True}}).run_id
    assert wait_until(lambda: published(db, probe), 15), "the wfe publisher published the dispatch"
    assert wait_until(lambda: state(db, probe) == "completed", 15)


def test_broker_worker_accepts_runs_reports_then_acks(db: psycopg.Connection, workers: Workers, amqp: Any) -> None:
    flow = Flow(db, mode="broker")
    runs = [wfe.submit(db, flow.workflow, {"spec": {"i": i, "sleep": 2 if i == 0 else 0}}).run_id for i in range(5)]
    workers.start(flow.env(MODE="broker", CONCURRENCY=2))
    assert wait_until(lambda: workers.executions(runs[0]), 20), workers.log()
    # a redelivered dispatch of a running attempt: accept_task answers duplicate, acked, not run twice
    body = one(db, "SELECT body::text FROM wfe.outbox WHERE run_id = %s AND kind = 'dispatch'", (runs[0],))
    amqp.basic_publish("wfe.commands", f"run.{flow.queue}.small", body.encode())
    assert wait_until(lambda: all(state(db, r) == "completed" for r in runs), 30), workers.log()
    assert wait_until(lambda: ready(amqp, f"wfe.{flow.queue}.small") == 0, 5)
    assert all(stage(db, r)["result"]["spec"]["i"] == i for i, r in enumerate(runs))
    assert all(events(db, r, "stage.accepted") for r in runs), "the acceptance handshake ran"
    assert one(db, "SELECT count(*) FROM wfe.events WHERE run_id = %s AND type = 'callback.duplicate'",
               (runs[0],)) == 1, workers.log()
    assert len(workers.executions(runs[0])) == 1
    # once the run has ended, a redelivery answers late: acked, not run
    amqp.basic_publish("wfe.commands", f"run.{flow.queue}.small", body.encode())
    assert wait_until(lambda: events(db, runs[0], "callback.late"), 10), workers.log()
    assert wait_until(lambda: ready(amqp, f"wfe.{flow.queue}.small") == 0, 5)
    assert len(workers.executions(runs[0])) == 1


def test_unusable_messages_go_round_the_retry_queue_then_to_the_dlq(db: psycopg.Connection, workers: Workers,
                                                                      amqp: Any) -> None:
    flow = Flow(db, mode="broker")
    workers.start(flow.env(MODE="broker"))
    topology(db, amqp, flow)
    marker = f"not an envelope {flow.tag}"
    amqp.basic_publish("wfe.commands", f"run.{flow.queue}.small", marker.encode())
    # wfe.broker_max_redeliveries = 2, wfe.broker_retry_ttl_ms = 300 (test/python/run.sh)
    found = None
    others = []  # other tests' dead letters, held (unacknowledged) so that the next get reaches past them
    deadline = time.monotonic() + 20
    while found is None and time.monotonic() < deadline:
        method, props, body = amqp.basic_get("wfe.dlq", auto_ack=False)
        if method is None:
            time.sleep(0.2)
            continue
        if body.decode() == marker:
            found = props
            amqp.basic_ack(method.delivery_tag)
        else:
            others.append(method.delivery_tag)
    for tag in others:
        amqp.basic_nack(tag, requeue=True)
    assert found is not None, workers.log()
    assert max(d["count"] for d in found.headers["x-death"]) == 3  # two retries allowed, the third is dead
    assert found.headers["x-wfe-dead-reason"] == "3 pre-acceptance retries"
    assert "dead-lettered a message" in workers.log()


def test_cancellation_request_stops_the_handler_and_is_acknowledged(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db, mode="broker")
    run = wfe.submit(db, flow.workflow, {"spec": {"sleep": 3600}}).run_id
    workers.start(flow.env(MODE="broker"))
    assert wait_until(lambda: workers.executions(run), 20), workers.log()
    assert wfe.cancel_run(db, run, "test") is wfe.Outcome.ACCEPTED
    assert wait_until(lambda: events(db, run, "stage.cancel_acknowledged"), 10), workers.log()
    assert workers.executions(run, "stopped") and not workers.executions(run, "end")
    assert wfe.wait_for_run(flow_dsn(), run, 10)["state"] == "cancelled"


def flow_dsn() -> str:
    from conftest import DSN
    return DSN


def test_large_track_input_is_fetched_by_reference(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db, mode="broker")
    big = "x" * 5000
    db.execute("SET wfe.track_threshold_bytes = 1024")  # read by the session that releases the stage
    run = wfe.submit(db, flow.workflow, {"spec": {"big": big}}).run_id
    db.execute("RESET wfe.track_threshold_bytes")
    assert one(db, "SELECT body -> 'payload_ref' IS NOT NULL AND body ->> 'track' = 'large' FROM wfe.outbox"
                   " WHERE run_id = %s AND kind = 'dispatch'", (run,))
    workers.start(flow.env(MODE="broker"))
    assert wait_until(lambda: state(db, run) == "completed", 20), workers.log()
    assert stage(db, run)["result"]["spec"]["big"] == big


def test_sigterm_in_broker_mode_finishes_the_task_then_acks(db: psycopg.Connection, workers: Workers,
                                                            amqp: Any) -> None:
    flow = Flow(db, mode="broker")
    run = wfe.submit(db, flow.workflow, {"spec": {"sleep": 1.5}}).run_id
    proc = workers.start(flow.env(MODE="broker"))
    assert wait_until(lambda: workers.executions(run), 20), workers.log()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0, workers.log()
    assert state(db, run) == "completed" and stage(db, run)["attempt"] == 1
    assert ready(amqp, f"wfe.{flow.queue}.small") == 0, "acknowledged before the worker exited"


def test_a_killed_consumer_is_replaced_through_heartbeat_ms(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db, mode="broker", extra="    heartbeat_ms: 1000\n")
    run = wfe.submit(db, flow.workflow, {"spec": {"sleep": 3600, "slow_attempts": 1}}).run_id
    first = workers.start(flow.env(MODE="broker", WORKER_ID="doomed"))
    assert wait_until(lambda: workers.executions(run), 20), workers.log()
    time.sleep(1.5)  # past heartbeat_ms: the heartbeats kept it
    assert stage(db, run)["state"] == "running"
    first.send_signal(signal.SIGKILL)
    first.wait()
    workers.start(flow.env(MODE="broker", WORKER_ID="heir"))
    assert wait_until(lambda: state(db, run) == "completed", 30), workers.log()
    s = stage(db, run)
    assert s["attempt"] == 2 and s["claimed_by"] == "heir"
    assert events(db, run, "stage.timed_out")[0]["clock"] == "heartbeat"
    # the first dispatch came back to the heir (unacked when its consumer died): answered duplicate (attempt 1
    # still running) or stale (timed out already: the heir started more than heartbeat_ms after the kill),
    # acked, not run
    assert one(db, "SELECT count(*) FROM wfe.events WHERE run_id = %s"
                   " AND type IN ('callback.duplicate', 'callback.stale')", (run,)) == 1
    assert len(workers.executions(run)) == 2


def test_a_killed_broker_worker_is_retried_after_its_lease(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db, mode="broker")  # no heartbeat_ms; execution deadline: one hour
    run = wfe.submit(db, flow.workflow, {"spec": {"sleep": 8, "slow_attempts": 2}}).run_id
    first = workers.start(flow.env(MODE="broker", LEASE_MS=3000, WORKER_ID="doomed"))
    assert wait_until(lambda: workers.executions(run), 20), workers.log()
    assert stage(db, run)["lease_ms"] == 3000, "accept_task took the worker's lease"
    time.sleep(4.5)  # longer than the lease: the heartbeats kept it alive
    assert stage(db, run)["state"] == "running" and stage(db, run)["attempt"] == 1
    fence = stage(db, run)["fence"]
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed = time.monotonic()
    workers.start(flow.env(MODE="broker", LEASE_MS=3000, WORKER_ID="heir"))
    assert wait_until(lambda: stage(db, run)["attempt"] == 2 and stage(db, run)["claimed_by"] == "heir", 30), \
        workers.log()
    assert time.monotonic() - killed < 12, "retried about one lease (3 s) after the kill, not the hour of the stage"
    assert events(db, run, "stage.timed_out")[0]["clock"] == "execution"
    # the dead worker's report, arriving while attempt 2 runs, is fenced and changes nothing
    def row() -> tuple:
        s = stage(db, run)
        return (s["state"], s["attempt"], s["fence"], s["result"], s["error"])
    before = row()
    assert wfe.complete_task(db, (run, "work", 1, fence), {"late": True}) is wfe.Outcome.STALE
    assert row() == before and before[0] == "running"
    assert wait_until(lambda: state(db, run) == "completed", 30), workers.log()
    assert stage(db, run)["result"]["attempt"] == 2


def test_the_broker_loop_reconnects_after_rabbitmq_drops_it(db: psycopg.Connection, workers: Workers) -> None:
    import os
    import subprocess
    rmqctl = os.environ["WFE_TEST_RMQCTL"]
    flow = Flow(db, mode="broker")
    run = wfe.submit(db, flow.workflow, {"spec": {"sleep": 20}}).run_id  # rabbitmqctl takes seconds to start (8 s loaded)
    workers.start(flow.env(MODE="broker"))
    assert wait_until(lambda: workers.executions(run), 20), workers.log()
    # drop every AMQP connection (the worker's, the wfe publisher's) while the task runs
    subprocess.run([rmqctl, "close_all_connections", "test: dropped"], check=True, capture_output=True)
    assert not workers.executions(run, "end"), "the connection dropped while the task ran"
    assert wait_until(lambda: state(db, run) == "completed", 40), workers.log()
    # its message went back to the queue unacknowledged: redelivered, answered duplicate (still running)
    # or late (the run is over), and acknowledged without running again
    assert wait_until(lambda: events(db, run, "callback.late") or events(db, run, "callback.duplicate"), 20), \
        workers.log()
    later = wfe.submit(db, flow.workflow, {"spec": {}}).run_id
    assert wait_until(lambda: state(db, later) == "completed", 30), workers.log()
    assert len(workers.executions(run)) == 1 and "reconnecting" in workers.log()


def test_while_postgresql_is_away_the_broker_loop_stops_consuming(db: psycopg.Connection, workers: Workers,
                                                                 amqp: Any) -> None:
    from conftest import DSN
    role = "wfe_py_outage"
    db.execute(f"DO $$ BEGIN CREATE ROLE {role} LOGIN SUPERUSER; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    flow = Flow(db, mode="broker")
    first = wfe.submit(db, flow.workflow, {"spec": {}}).run_id
    workers.start({**flow.env(MODE="broker"), "WFE_DSN": DSN.replace("user=postgres", f"user={role}")})
    assert wait_until(lambda: state(db, first) == "completed", 20), workers.log()
    try:
        # PostgreSQL refuses the worker from now on
        db.execute(f"ALTER ROLE {role} NOLOGIN")
        db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        run = wfe.submit(db, flow.workflow, {"spec": {}}).run_id
        assert wait_until(lambda: "consuming stops" in workers.log(), 15), workers.log()
        time.sleep(2)  # several retry-queue TTLs (300 ms): the message does not cycle on to wfe.dlq
        assert wait_until(lambda: ready(amqp, f"wfe.{flow.queue}.small") == 1, 5), workers.log()
        assert state(db, run) == "running" and stage(db, run)["state"] in ("queued", "dispatched")
    finally:
        db.execute(f"ALTER ROLE {role} LOGIN")
    assert wait_until(lambda: state(db, run) == "completed", 40), workers.log()
    assert "consuming again" in workers.log()
