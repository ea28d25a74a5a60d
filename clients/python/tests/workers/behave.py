"""A test worker: does what each task's input.spec says (sleep, fail, echo), logs each start and end.

Configured by environment: WFE_DSN, QUEUES, MODE (poll|broker), CONTRACTS (comma-separated),
CONCURRENCY, LEASE_MS (empty: none), GRACE_S, ONCE, WORKER_ID, EXEC_LOG, WFE_AMQP_URL, HEARTBEAT_S,
POLL_INTERVAL_S, POOLED (1: Worker(pooled=True)), BREAK_REPORTER (1: every report raises in the reporter's thread, as a bug there would).
spec: sleep, slow_attempts, fail_attempts, retryable, raise, not_json (return a set), big_mb (return a
string of that many MB).
"""
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


def note(task: wfe.Task, what: str) -> None:
    with lock, open(env("EXEC_LOG", os.devnull), "a") as f:
        f.write(f"{task.run_id} {task.stage} {task.attempt} {what} {running[1]}\n")


def behave(task: wfe.Task) -> dict:
    spec = (task.input or {}).get("spec") or {}
    with lock:
        running[0] += 1
        running[1] = max(running)
    note(task, "start")
    task.log.info("started")  # the per-task logger: "run R stage S attempt A: started"
    try:
        until = time.monotonic() + float(spec.get("sleep", 0)) * (1 if task.attempt <= int(spec.get("slow_attempts", 99)) else 0)
        while time.monotonic() < until:
            if task.stopped.wait(0.05):
                note(task, "stopped")
                return {"stopped": True}
        if spec.get("fail_attempts", 0) >= task.attempt:
            raise wfe.Fail("test.failed", f"attempt {task.attempt} fails", retryable=spec.get("retryable", True))
        if spec.get("raise"):
            raise RuntimeError("boom")
        note(task, "end")
        if spec.get("not_json"):
            return {"ids": {1, 2}}  # type: ignore[dict-item]
        if spec.get("big_mb"):
            return {"blob": "x" * (int(spec["big_mb"]) * 1024 * 1024)}
        return {"spec": spec, "attempt": task.attempt, "worker": task.contract, "size": len(str(task.input))}
    finally:
        with lock:
            running[0] -= 1


if env("BREAK_REPORTER"):
    def broken(*args: object, **kw: object) -> None:
        raise RuntimeError("the reporter is broken on purpose")
    wfe.calls.complete_task = wfe.calls.complete_tasks = wfe.calls.fail_task = broken  # type: ignore[assignment]

app = wfe.Worker(env("WFE_DSN", ""), worker_id=env("WORKER_ID"), concurrency=int(env("CONCURRENCY", "4")),
                 lease_ms=int(env("LEASE_MS")) if env("LEASE_MS") else None, grace_s=float(env("GRACE_S", "10")),
                 amqp_url=env("WFE_AMQP_URL"), heartbeat_s=float(env("HEARTBEAT_S")) if env("HEARTBEAT_S") else None,
                 poll_interval_s=float(env("POLL_INTERVAL_S", "5")), pooled=env("POOLED") == "1")
for contract in env("CONTRACTS", "").split(","):
    app.register(contract, behave)
app.run(env("QUEUES", "").split(","), mode=env("MODE") or None, once=bool(env("ONCE")))
