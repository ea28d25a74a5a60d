"""The poll worker against the real server: batches, concurrency, leases, SIGTERM, reconnects."""
from __future__ import annotations

import signal
import time

import psycopg

import wfe
from conftest import Flow, Workers, events, one, stage, wait_until


def state(db: psycopg.Connection, run_id: int) -> str:
    return one(db, "SELECT state FROM wfe.runs WHERE run_id = %s", (run_id,))


def test_poll_worker_runs_batches_with_bounded_concurrency(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db)
    runs = [wfe.submit(db, flow.workflow, {"spec": {"sleep": 0.3, "i": i}}).run_id for i in range(12)]
    proc = workers.start(flow.env(CONCURRENCY=4, ONCE=1))
    assert proc.wait(60) == 0, workers.log()
    assert [state(db, r) for r in runs] == ["completed"] * 12
    most = max(int(line.split()[4]) for r in runs for line in workers.executions(r))
    assert most == 4, "four handlers ran at once, never more"
    assert stage(db, runs[3])["result"]["spec"] == {"sleep": 0.3, "i": 3}


def test_a_task_submitted_later_wakes_the_worker(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db)
    workers.start(flow.env(POLL_INTERVAL_S=600))  # no safety-net claim during the test
    # started (its first line; a loaded machine may take seconds to import), then idle, listening
    assert wait_until(lambda: ", concurrency " in workers.log(), 60), workers.log()
    time.sleep(1.5)  # the worker is idle, listening
    began = time.monotonic()
    run = wfe.submit(db, flow.workflow, {"spec": {}}).run_id
    assert wait_until(lambda: state(db, run) == "completed", 10), workers.log()
    # woken by wfe_task_ready carrying the queue's tag (wfe.ready_tag), not by the 600 s safety net
    assert time.monotonic() - began < 3, workers.log()


def test_invalid_result_is_logged_with_the_schema_message(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db, output_schema={"type": "object", "required": ["approved"]})
    run = wfe.submit(db, flow.workflow, {"spec": {}}).run_id
    workers.start(flow.env())
    assert wait_until(lambda: events(db, run, "stage.invalid_result"), 20), workers.log()
    assert wait_until(lambda: "invalid_result: " in workers.log(), 5), workers.log()
    line = next(l for l in workers.log().splitlines() if "complete answered invalid_result" in l)
    # the schema's own words, as the server wrote them in the event
    assert events(db, run, "stage.invalid_result")[0]["error"] in line, line
    assert "approved" in line, line
    # and the per-task logger prefixed the handler's own line
    assert f"run {run} stage work attempt 1: started" in workers.log()


def test_failures_follow_the_retry_policy(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db)
    retried = wfe.submit(db, flow.workflow, {"spec": {"fail_attempts": 1}}).run_id
    final = wfe.submit(db, flow.workflow, {"spec": {"fail_attempts": 9, "retryable": False}}).run_id
    crash = wfe.submit(db, flow.workflow, {"spec": {"raise": True}}).run_id
    workers.start(flow.env())
    assert wait_until(lambda: state(db, retried) == "completed", 20), workers.log()
    assert stage(db, retried)["attempt"] == 2
    assert wait_until(lambda: state(db, final) == "failed", 10)
    assert stage(db, final)["attempt"] == 1 and stage(db, final)["error"]["code"] == "test.failed"
    assert wait_until(lambda: state(db, crash) == "failed", 20)
    err = stage(db, crash)["error"]
    assert err["code"] == "RuntimeError" and err["message"] == "boom" and "Traceback" in err["traceback"]
    assert stage(db, crash)["attempt"] == 3


def test_a_killed_worker_is_retried_after_its_lease(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db)  # execution deadline: one hour
    run = wfe.submit(db, flow.workflow, {"spec": {"sleep": 3600, "slow_attempts": 1}}).run_id
    first = workers.start(flow.env(LEASE_MS=3000, WORKER_ID="doomed"))
    assert wait_until(lambda: workers.executions(run), 10), workers.log()
    time.sleep(4.5)  # longer than the lease: heartbeats kept it alive
    assert stage(db, run)["state"] == "running" and stage(db, run)["attempt"] == 1
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed = time.monotonic()
    assert wait_until(lambda: events(db, run, "stage.timed_out"), 12), "the lease ran out"
    assert time.monotonic() - killed < 12, "about one lease (3 s) after the kill, not the hour of the stage"
    assert events(db, run, "stage.timed_out")[0]["clock"] == "execution"
    workers.start(flow.env(LEASE_MS=1500, WORKER_ID="heir"))
    assert wait_until(lambda: state(db, run) == "completed", 15), workers.log()
    s = stage(db, run)
    assert s["attempt"] == 2 and s["claimed_by"] == "heir" and s["result"]["attempt"] == 2


def test_sigterm_lets_running_tasks_finish(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db)
    runs = [wfe.submit(db, flow.workflow, {"spec": {"sleep": 1.5}}).run_id for _ in range(3)]
    proc = workers.start(flow.env(CONCURRENCY=3))
    assert wait_until(lambda: all(workers.executions(r) for r in runs), 10), workers.log()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    assert [state(db, r) for r in runs] == ["completed"] * 3, workers.log()
    assert all(stage(db, r)["attempt"] == 1 for r in runs), "nothing was run twice"
    later = wfe.submit(db, flow.workflow, {"spec": {}}).run_id
    time.sleep(0.5)
    assert stage(db, later)["state"] == "queued", "a stopped worker claims nothing more"


def test_sigterm_past_the_grace_period_reports_and_loses_nothing(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db)
    run = wfe.submit(db, flow.workflow, {"spec": {"sleep": 3600, "slow_attempts": 1}}).run_id
    proc = workers.start(flow.env(GRACE_S=0.5))
    assert wait_until(lambda: workers.executions(run), 10), workers.log()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    assert [e["error"] for e in events(db, run, "stage.retry_scheduled")] == ["worker.shutdown"], workers.log()
    workers.start(flow.env(WORKER_ID="next"))
    assert wait_until(lambda: state(db, run) == "completed", 15), workers.log()
    assert stage(db, run)["attempt"] == 2


def test_the_worker_reconnects_after_its_connections_drop(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db)
    first = wfe.submit(db, flow.workflow, {"spec": {"sleep": 1}}).run_id
    workers.start(flow.env(HEARTBEAT_S=0.2))
    assert wait_until(lambda: workers.executions(first), 10), workers.log()
    time.sleep(0.5)  # a heartbeat or two went out
    killed = one(db, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                     " WHERE datname = current_database() AND backend_type = 'client backend'"
                     "   AND pid <> pg_backend_pid() AND application_name = ''")
    assert killed >= 3  # listener, claims, heartbeats (and reports)
    assert wait_until(lambda: state(db, first) == "completed", 20), workers.log()
    second = wfe.submit(db, flow.workflow, {"spec": {}}).run_id
    assert wait_until(lambda: state(db, second) == "completed", 20), workers.log()
    assert "connected to PostgreSQL again" in workers.log() or "unreachable" in workers.log()
