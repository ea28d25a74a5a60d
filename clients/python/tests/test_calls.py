"""The typed SQL layer: Outcome words, SQLSTATE exceptions, submit inside a transaction, waiting for a run."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

import wfe
from conftest import DSN, Flow, one, stage, wait_until


def test_duplicate_and_conflict_reports_are_outcomes(db: psycopg.Connection) -> None:
    flow = Flow(db)
    run = wfe.submit(db, flow.workflow, {"spec": {}})
    [task] = wfe.claim_task(db, flow.queue, "w-dup")
    assert isinstance(task, wfe.Task) and task.run_id == run.run_id and task.input == {"spec": {}}
    assert wfe.complete_task(db, task, {"n": 1}) is wfe.Outcome.ACCEPTED
    assert wfe.complete_task(db, task, {"n": 1}) is wfe.Outcome.DUPLICATE
    assert wfe.complete_task(db, task, {"n": 2}) is wfe.Outcome.CONFLICT
    assert wfe.fail_task(db, task, {"code": "x"}) is wfe.Outcome.CONFLICT
    assert wfe.heartbeat(db, task) is wfe.Outcome.LATE  # the run has ended
    assert wfe.complete_task(db, (task.run_id, "nope", 1, 1), {}) is wfe.Outcome.UNKNOWN
    assert one(db, "SELECT count(*) FROM wfe.events WHERE run_id = %s AND type = 'callback.duplicate'",
               (run.run_id,)) == 1


def test_batch_reports_answer_per_task(db: psycopg.Connection) -> None:
    flow = Flow(db)
    runs = [wfe.submit(db, flow.workflow, {"spec": {"i": i}}).run_id for i in range(3)]
    tasks = wfe.claim_task(db, flow.queue, "w-batch", 3)
    assert sorted(t.run_id for t in tasks) == sorted(runs)
    answers = wfe.complete_tasks(db, [(t, {"i": t.input["spec"]["i"]}) for t in tasks])
    assert set(answers.values()) == {wfe.Outcome.ACCEPTED}
    again = wfe.complete_tasks(db, [(tasks[0], {"i": tasks[0].input["spec"]["i"]}), (tasks[1], {"other": 1})])
    assert again == {(tasks[0].run_id, "work"): wfe.Outcome.DUPLICATE, (tasks[1].run_id, "work"): wfe.Outcome.CONFLICT}


def test_sqlstates_become_exceptions(db: psycopg.Connection) -> None:
    with pytest.raises(wfe.UnknownObject) as e:
        wfe.submit(db, "no-such-workflow")
    assert e.value.sqlstate == "42704"
    with pytest.raises(wfe.InvalidDefinition) as d:
        with wfe.errors.translated():
            db.execute("SELECT wfe.create_definition('name: [unclosed')")
    assert d.value.sqlstate == "22023" and d.value.diagnostics[0]["code"] == "yaml.syntax"
    with pytest.raises(wfe.NullArgument):
        wfe.claim_task(db, None, "w")  # type: ignore[arg-type]
    flow = Flow(db, mode="broker")
    with pytest.raises(wfe.WrongState) as w:
        wfe.claim_task(db, flow.queue, "w")
    assert "broker delivery mode" in str(w.value)
    with pytest.raises(wfe.InvalidArgument):
        wfe.claim_task(db, flow.queue, "w", 0)
    with pytest.raises(wfe.LimitExceeded):
        wfe.complete_tasks(db, [((1, "s", 1, 1), {})] * 1001)
    with pytest.raises(wfe.InvalidArgument):
        wfe.submit(db, flow.workflow, {"spec": {}}, options={"no_such_option": 1})
    with pytest.raises(wfe.UnknownObject):
        wfe.report(db, -1)
    with pytest.raises(wfe.UnknownObject):  # a reference names the attempt that dispatched it
        wfe.fetch_payload(db, {"key": "sha256:" + "0" * 64, "sha256": "0" * 64,
                               "run_id": 987654321, "stage": "s", "attempt": 1, "fence": 1})
    with pytest.raises(wfe.InvalidArgument):  # ... and one that names none is malformed
        wfe.fetch_payload(db, {"key": "sha256:" + "0" * 64, "sha256": "0" * 64})


def test_submit_commits_and_rolls_back_with_the_callers_transaction(db: psycopg.Connection) -> None:
    flow = Flow(db)
    with psycopg.connect(DSN) as conn:  # not autocommit: submit runs in our transaction
        run = wfe.submit(conn, flow.workflow, {"spec": {}}, idempotency_key="k1")
        conn.rollback()
    assert one(db, "SELECT count(*) FROM wfe.runs WHERE run_id = %s", (run.run_id,)) == 0
    with psycopg.connect(DSN) as conn:
        with conn.transaction():
            first = wfe.submit(conn, flow.workflow, {"spec": {}}, idempotency_key="k1", priority=5)
        again = wfe.submit(conn, flow.workflow, {"spec": {}}, idempotency_key="k1")
        conn.commit()
    assert first.accepted and not again.accepted and again.run_id == first.run_id
    assert one(db, "SELECT priority FROM wfe.runs WHERE run_id = %s", (first.run_id,)) == 5


def test_wait_for_run_and_cancel(db: psycopg.Connection) -> None:
    flow = Flow(db)
    run = wfe.submit(db, flow.workflow, {"spec": {}})
    with pytest.raises(wfe.RunTimeout) as t:
        wfe.wait_for_run(DSN, run.run_id, timeout=0.5)
    assert t.value.report["state"] == "running"
    got = {}
    waiter = threading.Thread(target=lambda: got.update(wfe.wait_for_run(DSN, run.run_id, timeout=30)))
    started = time.monotonic()
    waiter.start()
    time.sleep(0.5)
    [task] = wfe.claim_task(db, flow.queue, "w-wait")
    assert wfe.complete_task(db, task, {"ok": True}) is wfe.Outcome.ACCEPTED
    waiter.join(30)
    assert got["state"] == "completed" and time.monotonic() - started < 4  # woken by wfe_run_done, not its 5 s look
    assert got["stages"][0]["result"] == {"ok": True}
    other = wfe.submit(db, flow.workflow, {"spec": {}})
    assert wfe.cancel_run(db, other.run_id, "test") is wfe.Outcome.ACCEPTED
    assert wfe.cancel_run(db, other.run_id) is wfe.Outcome.LATE
    assert wfe.cancel_run(db, -5) is wfe.Outcome.UNKNOWN
    assert wfe.wait_for_run(DSN, other.run_id, timeout=30)["state"] == "cancelled"
    assert [r["stage"] for r in wfe.run_timeline(db, run.run_id)] == ["work"]


def test_submit_returns_a_run_handle(db: psycopg.Connection) -> None:
    flow = Flow(db)
    run = wfe.submit(DSN, flow.workflow, {"spec": {}})
    assert isinstance(run, wfe.Run) and run.accepted and run.report()["state"] == "running"
    [task] = wfe.claim_task(db, flow.queue, "w-handle")
    assert wfe.complete_task(db, task, {"ok": True}) is wfe.Outcome.ACCEPTED
    assert run.result(timeout=30)["stages"][0]["result"] == {"ok": True}
    # submitted in the caller's transaction: the handle connects as that connection did
    with psycopg.connect(DSN) as conn:
        other = wfe.submit(conn, flow.workflow, {"spec": {}})
    assert other.cancel("no longer needed") is wfe.Outcome.ACCEPTED
    with pytest.raises(wfe.RunFailed) as failed:
        other.result(timeout=30)
    assert failed.value.report["state"] == "cancelled" and other.wait(timeout=5)["state"] == "cancelled"
    with pytest.raises(wfe.RunTimeout):
        wfe.submit(DSN, flow.workflow, {"spec": {}}).result(timeout=0.5)


def test_wait_for_run_shares_one_listener_that_survives_a_restart(db: psycopg.Connection) -> None:
    flow = Flow(db)
    runs = [wfe.submit(db, flow.workflow, {"spec": {"i": i}}).run_id for i in range(3)]
    dsn = DSN + " application_name=wfe-watch-test"
    got: dict = {}
    waiters = [threading.Thread(target=lambda r=r: got.update({r: wfe.wait_for_run(dsn, r, timeout=60)}))
               for r in runs]
    for w in waiters:
        w.start()
    listening = ("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'wfe-watch-test'"
                 " AND query LIKE 'LISTEN%%'")
    assert wait_until(lambda: one(db, listening) == 1, 10), "three waiters, one listening connection"
    time.sleep(0.5)
    assert one(db, listening) == 1
    # the server drops every connection of the waiters, as a restart would
    one(db, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'wfe-watch-test'")
    tasks = wfe.claim_task(db, flow.queue, "w-watch", 3)
    for task in tasks:
        assert wfe.complete_task(db, task, {"i": task.input["spec"]["i"]}) is wfe.Outcome.ACCEPTED
    for w in waiters:
        w.join(30)
    assert sorted(got) == sorted(runs) and all(got[r]["state"] == "completed" for r in runs)
    assert wfe.runs.watcher(dsn).connects >= 2, "the listener connected again after the drop"


def test_lease_is_renewed_by_heartbeats(db: psycopg.Connection) -> None:
    flow = Flow(db, extra="    execution_deadline_ms: 60000\n")
    run = wfe.submit(db, flow.workflow, {"spec": {}})
    # a lease well above the heartbeat interval, so a loaded machine's
    # scheduling does not let it lapse between two heartbeats
    [task] = wfe.claim_task(db, flow.queue, "w-lease", lease_ms=3000)
    first = stage(db, run.run_id)["deadline_at"]
    for _ in range(7):  # 4.2 s in all: past the first lease
        time.sleep(0.6)
        assert wfe.heartbeat(db, task) is wfe.Outcome.ACCEPTED
    s = stage(db, run.run_id)
    assert s["state"] == "running" and s["lease_ms"] == 3000 and s["deadline_at"] > first
    assert wfe.complete_task(db, task, {}) is wfe.Outcome.ACCEPTED


def test_the_operators_recovery_calls(db: psycopg.Connection) -> None:
    flow = Flow(db, retry="{ max_attempts: 1, initial_ms: 200, multiplier: 1.0, max_ms: 200, jitter: none }")
    run = wfe.submit(db, flow.workflow, {"spec": {}}).run_id
    [task] = wfe.claim_task(db, flow.queue, "w-ops")
    assert wfe.fail_task(db, task, {"code": "bad.input"}, retryable=False) is wfe.Outcome.ACCEPTED
    assert wfe.report(db, run)["state"] == "failed"
    # redrive: a new attempt under a new fence; the old one's report is stale
    wfe.redrive(db, run, "work", "input fixed upstream")
    assert stage(db, run)["state"] == "queued" and stage(db, run)["attempt"] == 2
    assert wfe.complete_task(db, task, {}) is wfe.Outcome.STALE
    [again] = wfe.claim_task(db, flow.queue, "w-ops")
    assert again.attempt == 2 and again.fence > task.fence
    # fail_stage: fenced and failed by hand, the failure route taken (the run
    # fails): the holder's report is then late
    wfe.fail_stage(db, run, "work", "operator gave up")
    assert wfe.complete_task(db, again, {}) is wfe.Outcome.LATE
    # skip_stage: completed by hand with a result; the run completes
    wfe.skip_stage(db, run, "work", {"by": "hand"}, "done elsewhere")
    assert wfe.report(db, run)["state"] == "completed"
    # replay: a new, linked run of the same plan and context
    other = wfe.replay(db, run, "once more")
    assert other != run and one(db, "SELECT replay_of FROM wfe.runs WHERE run_id = %s", (other,)) == run
    # refusals are exceptions: a completed stage cannot be redriven
    with pytest.raises(wfe.WfeError):
        wfe.redrive(db, run, "work")


def test_traceparent_goes_into_the_run_and_comes_back_per_attempt(db: psycopg.Connection) -> None:
    flow = Flow(db)
    trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    run = wfe.submit(db, flow.workflow, {"spec": {}}, traceparent=f"00-{trace}-{parent}-01")
    [task] = wfe.claim_task(db, flow.queue, "w-trace")
    assert task.run_id == run.run_id and task.traceparent is not None
    version, task_trace, span, flags = task.traceparent.split("-")
    assert (version, task_trace, flags) == ("00", trace, "01") and span != parent and len(span) == 16
    with pytest.raises(wfe.InvalidArgument, match="traceparent"):
        wfe.submit(db, flow.workflow, {"spec": {}}, traceparent="00-nope")
