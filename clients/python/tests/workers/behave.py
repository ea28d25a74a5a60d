"""A test worker: does what each task's input.spec says (sleep, fail, echo), logs each start and end.

Configured by environment: WFE_DSN, QUEUES, MODE (poll|broker), CONTRACTS (comma-separated),
CONCURRENCY, LEASE_MS (empty: none), GRACE_S, ONCE, WORKER_ID, EXEC_LOG, WFE_AMQP_URL, HEARTBEAT_S,
POLL_INTERVAL_S, POOLED (1: Worker(pooled=True)), BREAK_REPORTER (1: every report raises in the reporter's thread, as a bug there would),
ASYNC (1: the handler is an async def), SERVE (1: asyncio.run(app.serve(...)): async handlers on this loop),
QUEUE_CONCURRENCY (queue=N,...: Worker(queue_concurrency=...)).
spec: sleep, slow_attempts, fail_attempts, retryable, raise, not_json (return a set), big_mb (return a
string of that many MB).  The result carries the task's traceparent and the thread the handler ran on.
Each exec-log line: run stage attempt what most-at-once most-at-once-of-its-queue.
"""
import asyncio
import logging
import os
import sys
import threading
import time

import wfe

logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                    format="%(asctime)s [%(process)d] %(threadName)s %(levelname)s %(message)s")
env = os.environ.get
lock = threading.Lock()
running = [0, 0]  # now, most at once
per_queue = {}  # queue -> [now, most at once]


def note(task: wfe.Task, what: str) -> None:
    with lock, open(env("EXEC_LOG", os.devnull), "a") as f:
        f.write(f"{task.run_id} {task.stage} {task.attempt} {what} {running[1]} {per_queue[task.queue][1]}\n")


def begin(task: wfe.Task) -> dict:
    with lock:
        running[0] += 1
        running[1] = max(running)
        q = per_queue.setdefault(task.queue, [0, 0])
        q[0] += 1
        q[1] = max(q)
    note(task, "start")
    task.log.info("started")  # the per-task logger: "run R stage S attempt A: started"
    return (task.input or {}).get("spec") or {}


def end(task: wfe.Task) -> None:
    with lock:
        running[0] -= 1
        per_queue[task.queue][0] -= 1


def sleep_for(task: wfe.Task, spec: dict) -> float:
    return float(spec.get("sleep", 0)) * (1 if task.attempt <= int(spec.get("slow_attempts", 99)) else 0)


def behave(task: wfe.Task) -> dict:
    spec = begin(task)
    try:
        until = time.monotonic() + sleep_for(task, spec)
        while time.monotonic() < until:
            if task.stopped.wait(0.05):
                note(task, "stopped")
                return {"stopped": True}
        return outcome(task, spec)
    finally:
        end(task)


async def abehave(task: wfe.Task) -> dict:
    spec = begin(task)
    try:
        try:
            await asyncio.sleep(sleep_for(task, spec))
        except asyncio.CancelledError:
            note(task, "cancelled")
            raise
        return outcome(task, spec)
    finally:
        end(task)


def outcome(task: wfe.Task, spec: dict) -> dict:
    """What the spec asks the handler to do once it has slept: fail, raise, or return something."""
    if spec.get("fail_attempts", 0) >= task.attempt:
        raise wfe.Fail("test.failed", f"attempt {task.attempt} fails", retryable=spec.get("retryable", True))
    if spec.get("raise"):
        raise RuntimeError("boom")
    note(task, "end")
    if spec.get("not_json"):
        return {"ids": {1, 2}}  # type: ignore[dict-item]
    if spec.get("big_mb"):
        return {"blob": "x" * (int(spec["big_mb"]) * 1024 * 1024)}
    return {"spec": spec, "attempt": task.attempt, "worker": task.contract, "size": len(str(task.input)),
            "traceparent": task.traceparent, "thread": threading.current_thread().name}


if env("BREAK_REPORTER"):
    def broken(*args: object, **kw: object) -> None:
        raise RuntimeError("the reporter is broken on purpose")
    wfe.calls.complete_task = wfe.calls.complete_tasks = wfe.calls.fail_task = broken  # type: ignore[assignment]

app = wfe.Worker(env("WFE_DSN", ""), worker_id=env("WORKER_ID"), concurrency=int(env("CONCURRENCY", "4")),
                 lease_ms=int(env("LEASE_MS")) if env("LEASE_MS") else None, grace_s=float(env("GRACE_S", "10")),
                 amqp_url=env("WFE_AMQP_URL"), heartbeat_s=float(env("HEARTBEAT_S")) if env("HEARTBEAT_S") else None,
                 poll_interval_s=float(env("POLL_INTERVAL_S", "5")), pooled=env("POOLED") == "1",
                 queue_concurrency={q: int(n) for q, n in (kv.split("=") for kv in env("QUEUE_CONCURRENCY", "").split(",") if kv)})
for contract in env("CONTRACTS", "").split(","):
    app.register(contract, abehave if env("ASYNC") == "1" else behave)
if env("SERVE") == "1":
    asyncio.run(app.serve(env("QUEUES", "").split(","), mode=env("MODE") or None, once=bool(env("ONCE"))))
else:
    app.run(env("QUEUES", "").split(","), mode=env("MODE") or None, once=bool(env("ONCE")))
