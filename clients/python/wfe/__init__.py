"""wfe: workers and submitters for wfe, the durable workflow engine inside PostgreSQL.

Workers::

    app = wfe.Worker("dbname=shop")

    @app.handler("payment.review@1", queue="payments-review")
    def review(task: wfe.Task) -> dict:
        return {"approved": task.input["amount"] < 100000}

    app.run()

Submitters::

    with psycopg.connect("dbname=shop") as conn:      # your transaction
        run = wfe.submit(conn, "payment-routing", {"amount": 250, "account": "acc-1"})
    report = run.result(timeout=60)                   # RunFailed if it failed, RunTimeout after 60 s
"""
from __future__ import annotations

import logging

from .calls import (Run, Submitted, accept_task, ack_cancel, activate, alter_schedule, approve, backfill_schedule,
                    cancel_run, claim_task, complete_task, complete_tasks, configure_queue, create_definition,
                    create_schedule, drop_schedule, fail_task, fetch_payload, find_run, heartbeat, pause_schedule,
                    put_payload, queue_delivery, ready_tag, register_signal, register_worker, report, resume_schedule,
                    run_timeline, signal, submit, trigger_schedule)
from .errors import (DataCorrupted, InvalidArgument, InvalidDefinition, LimitExceeded, NullArgument,
                     PermissionDenied, RetrySubmit, UnknownObject, WfeError, WrongState)
from .outcome import Outcome
from .recovery import fail_stage, redispatch, redrive, redrive_dead_letters, replay, skip_stage
from .runs import RunFailed, RunTimeout, RunWatcher, wait_for_run
from .task import Fail, Task, TaskLogger
from .worker import Worker
from . import aio  # the asyncio API: wfe.aio.submit, wait_for_run, ...

__version__ = "0.3.0"  # written only here (pyproject.toml reads it); equal to wfe.control's default_version

# a library logs to its logger and lets the application decide where it goes
logging.getLogger("wfe").addHandler(logging.NullHandler())

__all__ = [
    "aio", "Worker", "Task", "TaskLogger", "Fail", "Outcome", "Run", "Submitted", "RunTimeout", "RunFailed", "RunWatcher",
    "submit", "cancel_run", "report", "run_timeline", "wait_for_run",
    "claim_task", "accept_task", "heartbeat", "complete_task", "fail_task", "complete_tasks",
    "fetch_payload", "ack_cancel", "queue_delivery", "ready_tag",
    "register_worker", "create_definition", "approve", "activate", "configure_queue",
    "register_signal", "signal", "find_run", "put_payload", "create_schedule", "alter_schedule", "drop_schedule",
    "pause_schedule", "resume_schedule", "trigger_schedule", "backfill_schedule",
    "redrive", "skip_stage", "fail_stage", "redispatch", "replay", "redrive_dead_letters",
    "WfeError", "NullArgument", "InvalidArgument", "InvalidDefinition", "UnknownObject", "WrongState",
    "LimitExceeded", "PermissionDenied", "RetrySubmit", "DataCorrupted",
]
