"""A wfe poll worker in plain psycopg (3.1 or later): claim tasks of one queue, run them, report back."""
import os
import select
import socket
import threading

import psycopg
from psycopg.types.json import Jsonb

DSN = os.environ.get("WFE_DSN", "dbname=shop")
QUEUE = os.environ.get("WFE_QUEUE", "payments-review")
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"
LEASE_MS = 30000  # a dead worker's task is retried after this; heartbeats renew it


def work(task_input):
    """The job itself: return a JSON-able result, or raise to fail."""
    return {"approved": task_input["amount"] < 100000}


def keep_alive(ids, every_s, stop):
    """Heartbeat on its own connection until stop is set or the attempt is gone."""
    with psycopg.connect(DSN, autocommit=True) as hb:
        while not stop.wait(every_s):
            answer = hb.execute("SELECT wfe.heartbeat(%s, %s, %s, %s)", ids).fetchone()[0]
            if answer != "accepted":  # stale or late: the attempt is no longer ours
                return


def run_task(db, task):
    run_id, stage, attempt, fence, task_input, heartbeat_ms = task
    ids = (run_id, stage, attempt, fence)
    stop = threading.Event()
    window_ms = min(LEASE_MS, heartbeat_ms or LEASE_MS)
    threading.Thread(target=keep_alive, args=(ids, window_ms / 3000, stop), daemon=True).start()
    try:
        result = work(task_input)
    except Exception as exc:
        answer = db.execute(
            "SELECT wfe.fail_task(%s, %s, %s, %s, %s, %s)",
            (*ids, Jsonb({"code": type(exc).__name__, "message": str(exc)}), True),
        ).fetchone()[0]
    else:
        answer = db.execute(
            "SELECT wfe.complete_task(%s, %s, %s, %s, %s)", (*ids, Jsonb(result))
        ).fetchone()[0]
    finally:
        stop.set()
    # accepted: done.  duplicate, conflict, stale, late, unknown: nothing to
    # redo, just log.  invalid_result: the result broke the output schema.
    print(f"{stage} run {run_id} attempt {attempt}: {answer}", flush=True)


def wait_for_queue(listener, tag, timeout_s):
    """Sleep until a wfe_task_ready notification carries QUEUE's tag, or timeout_s pass.

    psycopg 3.1 has no notifies(timeout=...): wait on the socket with select,
    then let libpq read what arrived and hand over its notifications."""
    ready, _, _ = select.select([listener.fileno()], [], [], timeout_s)
    if ready:
        listener.pgconn.consume_input()
        while (note := listener.pgconn.notifies()) is not None:
            if note.extra.decode() == tag:
                return


def main():
    listener = psycopg.connect(DSN, autocommit=True)
    listener.execute("LISTEN wfe_task_ready")  # this connection does nothing else
    db = psycopg.connect(DSN, autocommit=True)  # each call is its own transaction
    # notifications carry a keyed tag of the queue, not its name: ask for ours
    tag = db.execute("SELECT wfe.ready_tag(%s)", (QUEUE,)).fetchone()[0]
    while True:
        tasks = db.execute(
            "SELECT run_id, stage, attempt, fence, input, heartbeat_ms"
            "  FROM wfe.claim_task(%s, %s, 1, %s)",  # one at a time: we run one at a time
            (QUEUE, WORKER_ID, LEASE_MS),
        ).fetchall()
        for task in tasks:
            run_task(db, task)
        if not tasks:
            wait_for_queue(listener, tag, 10)  # the timeout is a safety net


if __name__ == "__main__":
    main()
