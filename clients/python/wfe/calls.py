"""Typed wrappers of wfe's SQL functions: the one place where the client writes SQL.

Each takes a psycopg connection (or cursor) and runs one statement on it, in
whatever transaction the connection is in: `submit` inside yours commits
with it.  Errors with a wfe SQLSTATE are raised as `wfe.errors` classes.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import time
import uuid
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import psycopg
import psycopg.conninfo
from psycopg.types.json import Jsonb

from .errors import translated
from ._result import JsonText
from .outcome import Outcome
from .task import JSON, Task

Executor = Union[psycopg.Connection, psycopg.Cursor]
log = logging.getLogger("wfe")
Ids = Tuple[int, str, int, int]


@dataclasses.dataclass(frozen=True)
class Submitted:
    """What wfe.submit answered -- the run, and accepted=False when an idempotency key found an
    earlier run -- and a handle on that run: result(), wait(), report(), cancel().

    The handle's calls use conninfo: the submit's own (submit given a string), else the submitting
    connection's parameters (password included); pass conninfo= to use another role."""

    run_id: int
    accepted: bool
    conninfo: Optional[str] = dataclasses.field(default=None, repr=False, compare=False)

    def _dsn(self, conninfo: Optional[str]) -> str:
        dsn = conninfo if conninfo is not None else self.conninfo
        if dsn is None:
            raise TypeError("this handle knows no connection: pass conninfo=")
        return dsn

    def wait(self, timeout: Optional[float] = None, *, conninfo: Optional[str] = None) -> Dict[str, Any]:
        """Block until the run ends (completed, failed or cancelled); its report.  RunTimeout after timeout."""
        from .runs import wait_for_run
        return wait_for_run(self._dsn(conninfo), self.run_id, timeout)

    def result(self, timeout: Optional[float] = None, *, conninfo: Optional[str] = None) -> Dict[str, Any]:
        """The report of the run once it completed; RunFailed if it failed or was cancelled, RunTimeout
        after timeout."""
        from .runs import RunFailed
        rep = self.wait(timeout, conninfo=conninfo)
        if rep.get("state") != "completed":
            raise RunFailed(self.run_id, rep)
        return rep

    def report(self, *, conninfo: Optional[str] = None) -> Dict[str, Any]:
        """wfe.report of the run, now."""
        with psycopg.connect(self._dsn(conninfo), autocommit=True) as conn:
            return report(conn, self.run_id)

    def cancel(self, reason: Optional[str] = None, *, conninfo: Optional[str] = None) -> Outcome:
        """wfe.cancel_run of the run."""
        with psycopg.connect(self._dsn(conninfo), autocommit=True) as conn:
            return cancel_run(conn, self.run_id, reason)


Run = Submitted
"""The run handle submit returns (the same class)."""


def _conninfo_of(db: Executor) -> Optional[str]:
    """A conninfo that connects as db's connection does (its parameters and password)."""
    conn = db.connection if isinstance(db, psycopg.Cursor) else db
    try:
        params = conn.info.get_parameters()
        if conn.info.password:
            params["password"] = conn.info.password
        return psycopg.conninfo.make_conninfo(**params)
    except Exception:  # not a psycopg connection we can read (a test double, a closed one)
        return None


def _one(db: Executor, sql: str, args: Sequence[Any]) -> Any:
    """The first column of the one row a statement returns."""
    with translated():
        row = db.execute(sql, args).fetchone()
    assert row is not None
    return row[0]


def _ids(task: Union[Task, Ids]) -> Ids:
    """(run_id, stage, attempt, fence) of a task or a tuple."""
    return task.ids if isinstance(task, Task) else tuple(task)  # type: ignore[return-value]


def submit(db: Union[Executor, str], workflow: str, context: Optional[Mapping[str, Any]] = None, *,
           idempotency_key: Optional[str] = None, tenant: Optional[str] = None,
           priority: Optional[int] = None, run_deadline_ms: Optional[int] = None,
           not_before: Optional[datetime.datetime] = None, execution_context: Optional[str] = None,
           traceparent: Optional[str] = None,
           options: Optional[Mapping[str, Any]] = None, retry: bool = False,
           retry_for: float = 60.0) -> Submitted:
    """wfe.submit in the caller's transaction: a rollback leaves nothing behind.

    db may also be a conninfo string: the submit then runs in a transaction of its own.  With
    retry=True (conninfo only) a submit that met a lost connection, a server restart or a
    concurrent submit of the same key (RetrySubmit) is tried again, with a backoff, for up to
    retry_for seconds, always with the same idempotency key (a new one is made when none is
    given): a try that committed before its answer was lost answers accepted=False with the
    same run_id, so the run exists once.  traceparent (W3C) puts the run in the caller's trace.
    """
    kw = dict(idempotency_key=idempotency_key, tenant=tenant, priority=priority, run_deadline_ms=run_deadline_ms,
              not_before=not_before, execution_context=execution_context, traceparent=traceparent,
              options=options)
    if isinstance(db, str):
        if retry:
            return _submit_retrying(db, workflow, context, retry_for, **kw)
        with psycopg.connect(db) as conn:
            return dataclasses.replace(submit(conn, workflow, context, **kw), conninfo=db)  # type: ignore[arg-type]
    if retry:
        raise TypeError("submit(retry=True) takes a conninfo string: a transaction that failed cannot be "
                        "retried from inside it (each try needs a connection and a transaction of its own)")
    with translated():
        row = db.execute(SUBMIT, submit_args(workflow, context, **kw)).fetchone()
    assert row is not None
    return Submitted(int(row[0]), bool(row[1]), _conninfo_of(db))


SUBMIT = "SELECT run_id, accepted FROM wfe.submit(%s, %s, %s, %s)"


def submit_args(workflow: str, context: Optional[Mapping[str, Any]], *, idempotency_key: Optional[str] = None,
                tenant: Optional[str] = None, priority: Optional[int] = None, run_deadline_ms: Optional[int] = None,
                not_before: Optional[datetime.datetime] = None, execution_context: Optional[str] = None,
                traceparent: Optional[str] = None, options: Optional[Mapping[str, Any]] = None) -> Tuple[Any, ...]:
    """The parameters of SUBMIT: the keyword options folded into wfe.submit's options object."""
    opts: Dict[str, Any] = dict(options or {})
    for key, value in (("tenant", tenant), ("priority", priority), ("run_deadline_ms", run_deadline_ms),
                       ("execution_context", execution_context), ("traceparent", traceparent),
                       ("not_before", not_before.isoformat() if not_before else None)):
        if value is not None:
            opts[key] = value
    return (workflow, Jsonb(dict(context or {})), idempotency_key, Jsonb(opts))


def _submit_retrying(conninfo: str, workflow: str, context: Optional[Mapping[str, Any]], retry_for: float,
                     **kw: Any) -> Submitted:
    """submit in a connection and transaction of its own, tried again until retry_for has passed."""
    from ._links import Backoff, first_line
    from .errors import RetrySubmit
    kw["idempotency_key"] = kw.get("idempotency_key") or f"wfe-submit-{uuid.uuid4()}"
    backoff = Backoff(0.2, 5.0)
    give_up = time.monotonic() + retry_for
    tries = 0
    while True:
        tries += 1
        try:
            with psycopg.connect(conninfo, connect_timeout=10) as conn:
                return dataclasses.replace(submit(conn, workflow, context, **kw), conninfo=conninfo)
        except (psycopg.OperationalError, RetrySubmit) as exc:
            delay = backoff.delay()
            if time.monotonic() + delay > give_up:
                raise
            log.warning("submit %s (key %s): %s; trying again in %.1f s (try %d)", workflow,
                        kw["idempotency_key"], first_line(exc), delay, tries + 1)
            time.sleep(delay)


def cancel_run(db: Executor, run_id: int, reason: Optional[str] = None) -> Outcome:
    """wfe.cancel_run: ACCEPTED, LATE (the run already had an intent) or UNKNOWN."""
    return Outcome(_one(db, "SELECT wfe.cancel_run(%s, %s)", (run_id, reason)))


def report(db: Executor, run_id: int) -> Dict[str, Any]:
    """wfe.report: the run's execution report (raises UnknownObject for no such run)."""
    return _one(db, "SELECT wfe.report(%s)", (run_id,))


def run_timeline(db: Executor, run_id: int) -> List[Dict[str, Any]]:
    """wfe.run_timeline: one dict per attempt, in order."""
    with translated():
        cur = db.execute("SELECT * FROM wfe.run_timeline(%s)", (run_id,))
        names = [c.name for c in (cur.description or [])]
        return [dict(zip(names, row)) for row in cur.fetchall()]


_TASK_COLUMNS = ("run_id, stage, attempt, fence, queue, worker, input, payload_ref, deadline_at, "
                 "heartbeat_ms, definition_digest, message_id, tenant, traceparent")


def claim_task(db: Executor, queue: str, worker_id: str, max_tasks: int = 1,
               lease_ms: Optional[int] = None) -> List[Task]:
    """wfe.claim_task: up to max_tasks tasks of a poll queue, now running for worker_id."""
    with translated():
        rows = db.execute(f"SELECT {_TASK_COLUMNS} FROM wfe.claim_task(%s, %s, %s, %s)",
                          (queue, worker_id, max_tasks, lease_ms)).fetchall()
    return [Task(run_id=r[0], stage=r[1], attempt=r[2], fence=r[3], queue=r[4], contract=r[5], input=r[6],
                 payload_ref=r[7], deadline_at=r[8], heartbeat_ms=r[9], definition_digest=r[10],
                 message_id=r[11], tenant=r[12], traceparent=r[13], mode="poll") for r in rows]


def accept_task(db: Executor, task: Union[Task, Ids], worker_id: str, lease_ms: Optional[int] = None) -> Outcome:
    """wfe.accept_task, the broker handshake: ACCEPTED means run it (under lease_ms, renewed by heartbeats, if
    given), anything else means do not."""
    return Outcome(_one(db, "SELECT wfe.accept_task(%s, %s, %s, %s, %s, %s)", (*_ids(task), worker_id, lease_ms)))


def heartbeat(db: Executor, task: Union[Task, Ids]) -> Outcome:
    """wfe.heartbeat: renews the attempt's heartbeat window and claim lease; not ACCEPTED: stop."""
    return Outcome(_one(db, "SELECT wfe.heartbeat(%s, %s, %s, %s)", _ids(task)))


def _text(value: JSON) -> str:
    """value as JSON text: as it is when it is JsonText already (encoded by the worker), else encoded."""
    return value if isinstance(value, JsonText) else json.dumps(value)


def _jsonb(value: JSON) -> Jsonb:
    """A jsonb parameter of value, JsonText passed through without a second encoding."""
    return Jsonb(value, dumps=_text)


def complete_task(db: Executor, task: Union[Task, Ids], result: JSON = None) -> Outcome:
    """wfe.complete_task with a JSON result (None counts as {}; JsonText is sent as it is)."""
    return Outcome(_one(db, "SELECT wfe.complete_task(%s, %s, %s, %s, %s)",
                        (*_ids(task), _jsonb({} if result is None else result))))


def fail_task(db: Executor, task: Union[Task, Ids], error: Optional[Mapping[str, Any]] = None,
              retryable: bool = True) -> Outcome:
    """wfe.fail_task; retryable=False fails the stage at once."""
    return Outcome(_one(db, "SELECT wfe.fail_task(%s, %s, %s, %s, %s, %s)",
                        (*_ids(task), _jsonb(error if isinstance(error, JsonText) else dict(error or {})),
                         retryable)))


def complete_tasks(db: Executor, reports: Iterable[Tuple[Union[Task, Ids], JSON]]) -> Dict[Tuple[int, str], Outcome]:
    """wfe.complete_tasks: many completions in one call and one transaction (at most 1000)."""
    body = []
    for task, result in reports:
        run_id, stage, attempt, fence = _ids(task)
        head = json.dumps({"run_id": run_id, "stage": stage, "attempt": attempt, "fence": fence})
        body.append(head[:-1] + ',"result":' + _text({} if result is None else result) + "}")
    if not body:
        return {}
    with translated():
        rows = db.execute("SELECT run_id, stage, outcome FROM wfe.complete_tasks(%s)",
                          (_jsonb(JsonText("[" + ",".join(body) + "]")),)).fetchall()
    return {(int(r[0]), r[1]): Outcome(r[2]) for r in rows}


def fetch_payload(db: Executor, ref: Mapping[str, Any]) -> JSON:
    """wfe.fetch_payload: the input of a large-track dispatch, checked against its SHA-256."""
    return _one(db, "SELECT wfe.fetch_payload(%s)", (Jsonb(dict(ref)),))


def ack_cancel(db: Executor, task: Union[Task, Ids]) -> Outcome:
    """wfe.ack_cancel: record that a cancelled attempt stopped (the values of the cancel message)."""
    return Outcome(_one(db, "SELECT wfe.ack_cancel(%s, %s, %s, %s)", _ids(task)))


def ready_tag(db: Executor, queue: str) -> str:
    """wfe.ready_tag: the payload wfe_task_ready carries for queue (a keyed tag, never the name); PermissionDenied
    unless the role may claim from it."""
    return str(_one(db, "SELECT wfe.ready_tag(%s)", (queue,)))


def queue_delivery(db: Executor, queue: str) -> str:
    """wfe.queue_delivery: the queue's delivery mode, ``poll`` or ``broker`` (poll when never configured)."""
    return str(_one(db, "SELECT wfe.queue_delivery(%s)", (queue,)))


def setting(db: Executor, name: str) -> Optional[str]:
    """A setting as the server has it, in its base unit (ms, bytes) and without the unit; None when unknown."""
    with translated():
        row = db.execute("SELECT setting FROM pg_catalog.pg_settings WHERE name = %s", (name,)).fetchone()
    return row[0] if row else None


# --- definitions, contracts and queues (the setup psql does, from Python) -----------------------

def register_worker(db: Executor, ref: str, queue: str, *, input_schema: Optional[Mapping[str, Any]] = None,
                    output_schema: Optional[Mapping[str, Any]] = None) -> None:
    """wfe.register_worker: the worker contract ref (``name@N``) served on queue, with its JSON Schemas."""
    _one(db, "SELECT wfe.register_worker(%s, %s, %s, %s)",
         (ref, queue, Jsonb(dict(input_schema or {})), Jsonb(dict(output_schema or {}))))


def create_definition(db: Executor, source: str) -> str:
    """wfe.create_definition: store a workflow's YAML source (as a draft); its digest (``sha256:...``)."""
    return str(_one(db, "SELECT wfe.create_definition(%s)", (source,)))


def approve(db: Executor, workflow: str, version: str) -> None:
    """wfe.approve: approve a stored version of workflow."""
    _one(db, "SELECT wfe.approve(%s, %s)", (workflow, version))


def activate(db: Executor, workflow: str, version: str) -> None:
    """wfe.activate: make an approved version the one new runs of workflow use."""
    _one(db, "SELECT wfe.activate(%s, %s)", (workflow, version))


def configure_queue(db: Executor, queue: str, delivery: str = "poll", *, max_in_flight: Optional[int] = None,
                    paused: bool = False) -> None:
    """wfe.configure_queue: a queue's delivery mode (poll or broker), in-flight limit and pause."""
    _one(db, "SELECT wfe.configure_queue(%s, %s, %s, %s)", (queue, delivery, max_in_flight, paused))


# --- signals, run lookup, payloads and schedules (the 0.3.0 SQL API) ----------------------------

def register_signal(db: Executor, ref: str, payload_schema: Optional[Mapping[str, Any]] = None) -> None:
    """wfe.register_signal: a signal contract (``name@N``) and the JSON Schema of its payload."""
    _one(db, "SELECT wfe.register_signal(%s, %s)", (ref, Jsonb(dict(payload_schema or {}))))


def signal(db: Executor, run_id: int, signal: str, payload: Optional[Mapping[str, Any]] = None, *,
           idempotency_key: Optional[str] = None) -> Outcome:
    """wfe.signal: ACCEPTED (a waiting stage took it), BUFFERED (kept for a wait to come), DUPLICATE,
    CONFLICT, LATE or UNKNOWN; PermissionDenied without wfe.grant_signal."""
    return Outcome(_one(db, "SELECT wfe.signal(%s, %s, %s, %s)",
                        (run_id, signal, Jsonb(dict(payload or {})), idempotency_key)))


def find_run(db: Executor, workflow: str, idempotency_key: str, tenant: Optional[str] = None) -> Optional[int]:
    """wfe.find_run: the run of workflow submitted with idempotency_key (None when there is none)."""
    found = _one(db, "SELECT wfe.find_run(%s, %s, %s)", (workflow, idempotency_key, tenant))
    return None if found is None else int(found)


def put_payload(db: Executor, body: JSON) -> str:
    """wfe.put_payload: store a large run command's input; the key its payload_ref names."""
    return str(_one(db, "SELECT wfe.put_payload(%s)", (_jsonb(body),)))


def create_schedule(db: Executor, name: str, workflow: str, cron: str, context: Optional[Mapping[str, Any]] = None,
                    options: Optional[Mapping[str, Any]] = None) -> None:
    """wfe.create_schedule: submit workflow with context at each cron tick (options as wfe.submit's, plus the
    schedule's own: see docs/runtime.md "Schedules")."""
    _one(db, "SELECT wfe.create_schedule(%s, %s, %s, %s, %s)",
         (name, workflow, cron, Jsonb(dict(context or {})), Jsonb(dict(options or {}))))


def alter_schedule(db: Executor, name: str, *, cron: Optional[str] = None, context: Optional[Mapping[str, Any]] = None,
                   options: Optional[Mapping[str, Any]] = None) -> None:
    """wfe.alter_schedule: change what is given (None keeps it)."""
    _one(db, "SELECT wfe.alter_schedule(%s, %s, %s, %s)",
         (name, cron, None if context is None else Jsonb(dict(context)),
          None if options is None else Jsonb(dict(options))))


def drop_schedule(db: Executor, name: str) -> None:
    """wfe.drop_schedule."""
    _one(db, "SELECT wfe.drop_schedule(%s)", (name,))


def pause_schedule(db: Executor, name: str) -> None:
    """wfe.pause_schedule: no ticks until resumed."""
    _one(db, "SELECT wfe.pause_schedule(%s)", (name,))


def resume_schedule(db: Executor, name: str) -> None:
    """wfe.resume_schedule."""
    _one(db, "SELECT wfe.resume_schedule(%s)", (name,))


def trigger_schedule(db: Executor, name: str) -> int:
    """wfe.trigger_schedule: one run now, outside the cron; its run id."""
    return int(_one(db, "SELECT wfe.trigger_schedule(%s)", (name,)))


def backfill_schedule(db: Executor, name: str, from_time: datetime.datetime, to_time: datetime.datetime) -> int:
    """wfe.backfill_schedule: a run for every tick from from_time to to_time not run yet; how many started."""
    return int(_one(db, "SELECT wfe.backfill_schedule(%s, %s, %s)", (name, from_time, to_time)))
