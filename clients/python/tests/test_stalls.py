"""Never a silent stall (issue 26): a bad result fails its own attempt, a broken reporter stops the
worker with its cause, a queue served in the wrong mode is one clear error, a lease never outlives
the execution deadline, and a submit survives a server restart."""
from __future__ import annotations

import os
import subprocess
import threading
import time

import psycopg
import pytest

import wfe
from conftest import DSN, Flow, Workers, events, one, stage, wait_until

ONE_TRY = "{ max_attempts: 1, initial_ms: 200, multiplier: 1.0, max_ms: 200, jitter: none }"


def state(db: psycopg.Connection, run_id: int) -> str:
    return one(db, "SELECT state FROM wfe.runs WHERE run_id = %s", (run_id,))


def test_a_result_that_is_not_json_fails_the_attempt_and_the_worker_goes_on(db: psycopg.Connection,
                                                                             workers: Workers) -> None:
    flow = Flow(db, retry=ONE_TRY)
    bad = wfe.submit(db, flow.workflow, {"spec": {"not_json": True}}).run_id
    proc = workers.start(flow.env())
    assert wait_until(lambda: state(db, bad) == "failed", 20), workers.log()
    err = stage(db, bad)["error"]
    assert err["code"] == "result.refused" and "the result is not JSON" in err["message"], err
    good = wfe.submit(db, flow.workflow, {"spec": {}}).run_id
    assert wait_until(lambda: state(db, good) == "completed", 20), "the reporter still reports: " + workers.log()
    assert proc.poll() is None
    assert "failed in" in workers.log() and "result.refused: the result is not JSON" in workers.log()


def test_a_100_mb_result_fails_the_attempt_as_result_refused(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db, retry=ONE_TRY)
    big = wfe.submit(db, flow.workflow, {"spec": {"big_mb": 100}}).run_id
    workers.start(flow.env())
    assert wait_until(lambda: state(db, big) == "failed", 60), workers.log()
    err = stage(db, big)["error"]
    assert err["code"] == "result.refused", err
    assert "more than wfe.max_payload_bytes (67108864)" in err["message"], err
    good = wfe.submit(db, flow.workflow, {"spec": {}}).run_id
    assert wait_until(lambda: state(db, good) == "completed", 20), workers.log()


def test_a_worker_whose_reporter_breaks_exits_non_zero_and_claims_no_more(db: psycopg.Connection,
                                                                          workers: Workers) -> None:
    flow = Flow(db)
    runs = [wfe.submit(db, flow.workflow, {"spec": {"sleep": 0.2, "i": i}}).run_id for i in range(4)]
    proc = workers.start(flow.env(BREAK_REPORTER=1, CONCURRENCY=1, GRACE_S=1))
    assert proc.wait(30) != 0, workers.log()
    log = workers.log()
    assert "the reporter failed, stopping: RuntimeError: the reporter is broken on purpose" in log, log
    started = [r for r in runs if workers.executions(r)]
    assert 1 <= len(started) <= 2, "it stopped claiming once its reporter broke"
    time.sleep(1)
    assert sum(1 for r in runs if stage(db, r)["state"] == "queued") >= 2, "the rest stay for another worker"


def test_a_queue_in_the_other_mode_is_one_clear_error(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db, mode="broker")
    proc = workers.start(flow.env(MODE="poll"))
    assert proc.wait(30) != 0
    assert f"cannot serve {flow.queue} (a broker queue) in poll mode" in workers.log(), workers.log()
    assert wfe.queue_delivery(db, flow.queue) == "broker"
    assert wfe.queue_delivery(db, "pyq-never-configured") == "poll"


def test_the_default_lease_never_outlives_a_shorter_execution_deadline(db: psycopg.Connection,
                                                                       workers: Workers) -> None:
    flow = Flow(db, extra="    execution_deadline_ms: 2000\n")
    run = wfe.submit(db, flow.workflow, {"spec": {"sleep": 6, "slow_attempts": 1}}).run_id
    workers.start(flow.env(LEASE_MS=30000))  # the default lease, longer than the stage's 2 s
    assert wait_until(lambda: workers.executions(run), 10), workers.log()
    started = time.monotonic()
    assert wait_until(lambda: events(db, run, "stage.timed_out"), 8), workers.log()
    assert time.monotonic() - started < 4.5, "timed out at the execution deadline (2 s), not the lease (30 s)"
    assert wait_until(lambda: state(db, run) == "completed", 20), workers.log()
    assert stage(db, run)["attempt"] == 2


def test_definitions_and_contracts_from_python(db: psycopg.Connection) -> None:
    tag = f"defs{os.getpid()}"
    wfe.register_worker(db, f"py.{tag}@1", f"pyq-{tag}", output_schema={"type": "object"})
    wfe.configure_queue(db, f"pyq-{tag}", "broker", max_in_flight=5)
    assert wfe.queue_delivery(db, f"pyq-{tag}") == "broker"
    source = f"""
name: py-{tag}
version: "1.0.0"
entry: work
stages:
  - name: work
    type: worker
    queue: pyq-{tag}
    worker: py.{tag}@1
    on_success: completed
    on_failure: failed
"""
    assert wfe.create_definition(db, source).startswith("sha256:")
    wfe.approve(db, f"py-{tag}", "1.0.0")
    wfe.activate(db, f"py-{tag}", "1.0.0")
    assert wfe.submit(db, f"py-{tag}", {}).accepted
    with pytest.raises(wfe.InvalidDefinition):
        wfe.create_definition(db, "name: broken\n")
    with pytest.raises(wfe.UnknownObject):
        wfe.activate(db, "py-no-such-workflow", "1.0.0")


def test_submit_retry_survives_a_server_restart(db: psycopg.Connection) -> None:
    flow = Flow(db)
    with pytest.raises(TypeError, match="conninfo"):
        wfe.submit(db, flow.workflow, {"spec": {}}, retry=True)
    first = wfe.submit(DSN, flow.workflow, {"spec": {}}, idempotency_key=f"k-{flow.tag}", retry=True)
    again = wfe.submit(DSN, flow.workflow, {"spec": {}}, idempotency_key=f"k-{flow.tag}", retry=True)
    assert first.accepted and not again.accepted and again.run_id == first.run_id
    pg_ctl = [os.path.join(os.environ["WFE_TEST_PGBIN"], "pg_ctl"), "-D", os.environ["WFE_TEST_PGDATA"], "-w"]
    if os.geteuid() == 0:  # the harness runs the server as postgres when started as root
        pg_ctl = ["runuser", "-u", "postgres", "--"] + pg_ctl
    log = os.path.join(os.environ["WFE_TEST_PGDATA"], "restart.log")
    subprocess.run(pg_ctl + ["-m", "fast", "stop"], check=True, capture_output=True, cwd="/")
    restart = threading.Timer(2.0, lambda: subprocess.run(pg_ctl + ["-l", log, "start"], check=True,
                                                          capture_output=True, cwd="/"))
    restart.start()
    try:
        began = time.monotonic()
        run = wfe.submit(DSN, flow.workflow, {"spec": {}}, retry=True, retry_for=60)
        assert run.accepted and time.monotonic() - began >= 1.5, "it waited for the server"
    finally:
        restart.join()
    with psycopg.connect(DSN, autocommit=True) as conn:
        assert one(conn, "SELECT count(*) FROM wfe.runs WHERE run_id = %s", (run.run_id,)) == 1
