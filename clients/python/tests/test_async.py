"""async def handlers, the asyncio API (wfe.aio, Worker.serve), the handler pool and per-queue concurrency,
against the real server (and RabbitMQ for broker mode)."""
from __future__ import annotations

import asyncio
import signal
import time

import psycopg
import pytest

import wfe
from conftest import DSN, Flow, Workers, events, needs_broker, one, stage, wait_until

MODES = ["poll", pytest.param("broker", marks=needs_broker)]


def state(db: psycopg.Connection, run_id: int) -> str:
    return one(db, "SELECT state FROM wfe.runs WHERE run_id = %s", (run_id,))


@pytest.mark.parametrize("mode", MODES)
def test_async_handlers_run_together_on_one_event_loop(db: psycopg.Connection, workers: Workers, mode: str) -> None:
    flow = Flow(db, mode=mode)
    # each sleeps 2 s: long enough for all twenty to be accepted one by one (broker) before the first ends
    runs = [wfe.submit(db, flow.workflow, {"spec": {"sleep": 2.0, "i": i}}).run_id for i in range(20)]
    began = time.monotonic()
    proc = workers.start(flow.env(ASYNC=1, CONCURRENCY=20, ONCE=1))
    assert proc.wait(60) == 0, workers.log()
    assert [state(db, r) for r in runs] == ["completed"] * 20, workers.log()
    results = [stage(db, r)["result"] for r in runs]
    # one thread, the worker's event loop, ran every handler; twenty at once, so about one sleep's time
    assert {r["thread"] for r in results} == {"wfe-asyncio"}
    assert max(int(line.split()[4]) for r in runs for line in workers.executions(r)) == 20
    assert time.monotonic() - began < 20, "the sleeps overlapped (one after another: 40 s)"
    assert results[7]["spec"] == {"sleep": 2.0, "i": 7}


def test_sync_handlers_run_on_a_bounded_pool(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db)
    runs = [wfe.submit(db, flow.workflow, {"spec": {"sleep": 0.2, "i": i}}).run_id for i in range(16)]
    proc = workers.start(flow.env(CONCURRENCY=3, ONCE=1))
    assert proc.wait(60) == 0, workers.log()
    threads = {stage(db, r)["result"]["thread"] for r in runs}
    # not a thread per attempt: at most three pool threads ran the sixteen handlers
    assert threads <= {"wfe-handler-1", "wfe-handler-2", "wfe-handler-3"} and len(threads) >= 2, threads


@pytest.mark.parametrize("mode", MODES)
def test_queue_concurrency_caps_one_queue(db: psycopg.Connection, workers: Workers, mode: str) -> None:
    narrow, wide = Flow(db, mode=mode), Flow(db, mode=mode)
    slow = [wfe.submit(db, narrow.workflow, {"spec": {"sleep": 0.4}}).run_id for _ in range(5)]
    fast = [wfe.submit(db, wide.workflow, {"spec": {"sleep": 0.4}}).run_id for _ in range(8)]
    proc = workers.start({"QUEUES": f"{narrow.queue},{wide.queue}", "CONTRACTS": f"{narrow.contract},{wide.contract}",
                          "CONCURRENCY": "6", "QUEUE_CONCURRENCY": f"{narrow.queue}=1", "ONCE": "1"})
    assert proc.wait(90) == 0, workers.log()
    assert [state(db, r) for r in slow + fast] == ["completed"] * 13, workers.log()
    most_narrow = max(int(line.split()[5]) for r in slow for line in workers.executions(r))
    most_wide = max(int(line.split()[5]) for r in fast for line in workers.executions(r))
    most = max(int(line.split()[4]) for r in slow + fast for line in workers.executions(r))
    assert most_narrow == 1, "the capped queue ran one handler at a time"
    assert most_wide >= 2 and most <= 6, (most_wide, most)


def test_serve_runs_async_handlers_on_the_callers_loop_and_aio_awaits_them(db: psycopg.Connection,
                                                                           workers: Workers) -> None:
    flow = Flow(db)
    workers.start(flow.env(ASYNC=1, SERVE=1, CONCURRENCY=8))

    async def main() -> list:
        # a submit inside the caller's async transaction: rolled back, it leaves nothing behind
        async with await psycopg.AsyncConnection.connect(DSN) as conn:
            gone = await wfe.aio.submit(conn, flow.workflow, {"spec": {}}, idempotency_key=f"{flow.tag}-gone")
            await conn.rollback()
        async with await psycopg.AsyncConnection.connect(DSN) as conn:
            runs = [await wfe.aio.submit(conn, flow.workflow, {"spec": {"sleep": 0.3, "i": i}}) for i in range(6)]
            failing = await wfe.aio.submit(conn, flow.workflow, {"spec": {"fail_attempts": 9, "retryable": False}})
        assert all(isinstance(r, wfe.aio.AsyncRun) and r.accepted for r in runs)
        # many waits at once, over the process's one listening connection
        before = wfe.runs.watcher(DSN).connects
        reports = await asyncio.gather(*(r.result(timeout=60) for r in runs))
        assert wfe.runs.watcher(DSN).connects <= before + 1
        with pytest.raises(wfe.RunFailed) as failed:
            await failing.result(timeout=60)
        assert failed.value.report["state"] == "failed"
        again = await wfe.aio.submit(DSN, flow.workflow, {"spec": {}}, idempotency_key=f"{flow.tag}-once", retry=True)
        same = await wfe.aio.submit(DSN, flow.workflow, {"spec": {}}, idempotency_key=f"{flow.tag}-once", retry=True)
        assert same.run_id == again.run_id and not same.accepted
        assert (await again.wait(60))["state"] == "completed"
        with pytest.raises(wfe.RunTimeout):
            late = await wfe.aio.submit(DSN, flow.workflow, {"spec": {"sleep": 30}})
            await late.result(timeout=0.5)
        assert await late.cancel("not needed") is wfe.Outcome.ACCEPTED
        assert (await late.wait(60))["state"] == "cancelled"
        return [gone, reports]

    gone, reports = asyncio.run(main())
    assert one(db, "SELECT count(*) FROM wfe.runs WHERE run_id = %s", (gone.run_id,)) == 0
    assert [r["state"] for r in reports] == ["completed"] * 6
    # Worker.serve ran the handlers on the worker script's own asyncio.run loop: its main thread
    assert {r["stages"][0]["result"]["thread"] for r in reports} == {"MainThread"}


@pytest.mark.parametrize("mode", MODES)
def test_an_async_handler_past_the_grace_period_is_cancelled(db: psycopg.Connection, workers: Workers,
                                                             mode: str) -> None:
    flow = Flow(db, mode=mode)
    run = wfe.submit(db, flow.workflow, {"spec": {"sleep": 60}}).run_id
    proc = workers.start(flow.env(ASYNC=1, GRACE_S=0.5))
    assert wait_until(lambda: workers.executions(run), 20), workers.log()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0, workers.log()
    assert workers.executions(run, "cancelled"), "CancelledError reached the handler"
    assert [e["error"] for e in events(db, run, "stage.retry_scheduled")] == ["worker.shutdown"], workers.log()


@needs_broker
def test_a_cancellation_request_cancels_an_async_handler(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db, mode="broker")
    run = wfe.submit(db, flow.workflow, {"spec": {"sleep": 60}}).run_id
    workers.start(flow.env(ASYNC=1))
    assert wait_until(lambda: workers.executions(run), 20), workers.log()
    assert wfe.cancel_run(db, run, "no longer needed") is wfe.Outcome.ACCEPTED
    assert wait_until(lambda: workers.executions(run, "cancelled"), 20), workers.log()
    assert wait_until(lambda: state(db, run) == "cancelled", 20), workers.log()
    assert wait_until(lambda: "cancel acknowledged" in workers.log(), 10), workers.log()


@pytest.mark.parametrize("mode", MODES)
def test_handlers_get_their_attempts_traceparent(db: psycopg.Connection, workers: Workers, mode: str) -> None:
    flow = Flow(db, mode=mode)
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    run = wfe.submit(db, flow.workflow, {"spec": {"fail_attempts": 1}}, traceparent=f"00-{trace}-00f067aa0ba902b7-01").run_id
    workers.start(flow.env(ASYNC=1 if mode == "broker" else 0))
    assert wait_until(lambda: state(db, run) == "completed", 30), workers.log()
    got = stage(db, run)["result"]["traceparent"]
    # the second attempt's own span, a child of the run's span in the submitter's trace (as wfe.run_spans has it)
    want = one(db, "SELECT wfe._attempt_traceparent(trace_id, span_id, trace_flags, 'work', 2) FROM wfe.runs "
                   "WHERE run_id = %s", (run,))
    assert got == want and got.split("-")[1] == trace, (got, want)
    spans = one(db, "SELECT wfe.run_spans(%s)", (run,))
    ids = [s["spanId"] for rs in spans["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    assert got.split("-")[2] in ids
