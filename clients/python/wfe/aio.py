"""The asyncio API: submit, await, report and cancel runs from coroutines, on psycopg's AsyncConnection.

    async with await psycopg.AsyncConnection.connect("dbname=shop") as conn:   # your transaction
        run = await wfe.aio.submit(conn, "payment-routing", {"amount": 250, "account": "acc-1"})
    report = await run.result(timeout=60)

Workers take ``async def`` handlers directly (``wfe.Worker``; ``await app.serve()``
runs them on your event loop).  Waits share the process's one ``LISTEN
wfe_run_done`` connection with the sync API (``wfe.RunWatcher``): a thread
hears the notifications and wakes the awaiting coroutines through their event
loop; the reports themselves are read on one AsyncConnection per event loop
and conninfo.
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
import weakref
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import psycopg
import psycopg.conninfo
from psycopg.types.json import Jsonb

from . import calls, runs
from ._links import Backoff, first_line
from .errors import RetrySubmit, translated
from .outcome import Outcome
from .runs import FINISHED, LOOK_AGAIN_S, RunFailed, RunTimeout

__all__ = ["submit", "AsyncRun", "wait_for_run", "report", "cancel_run", "signal", "find_run"]


@dataclasses.dataclass(frozen=True)
class AsyncRun:
    """What aio.submit answered, and a handle on the run whose calls are coroutines (as wfe.Run's)."""

    run_id: int
    accepted: bool
    conninfo: Optional[str] = dataclasses.field(default=None, repr=False, compare=False)

    def _dsn(self, conninfo: Optional[str]) -> str:
        dsn = conninfo if conninfo is not None else self.conninfo
        if dsn is None:
            raise TypeError("this handle knows no connection: pass conninfo=")
        return dsn

    async def wait(self, timeout: Optional[float] = None, *, conninfo: Optional[str] = None) -> Dict[str, Any]:
        """The report once the run ended (completed, failed or cancelled); RunTimeout after timeout."""
        return await wait_for_run(self._dsn(conninfo), self.run_id, timeout)

    async def result(self, timeout: Optional[float] = None, *, conninfo: Optional[str] = None) -> Dict[str, Any]:
        """The report once the run completed; RunFailed if it failed or was cancelled, RunTimeout after timeout."""
        rep = await self.wait(timeout, conninfo=conninfo)
        if rep.get("state") != "completed":
            raise RunFailed(self.run_id, rep)
        return rep

    async def report(self, *, conninfo: Optional[str] = None) -> Dict[str, Any]:
        """wfe.report of the run, now."""
        async with await psycopg.AsyncConnection.connect(self._dsn(conninfo), autocommit=True) as conn:
            return await report(conn, self.run_id)

    async def cancel(self, reason: Optional[str] = None, *, conninfo: Optional[str] = None) -> Outcome:
        """wfe.cancel_run of the run."""
        async with await psycopg.AsyncConnection.connect(self._dsn(conninfo), autocommit=True) as conn:
            return await cancel_run(conn, self.run_id, reason)


async def _one(conn: psycopg.AsyncConnection, sql: str, args: Tuple[Any, ...]) -> Any:
    """The first column of the one row a statement returns (wfe's SQLSTATEs raised as WfeError)."""
    with translated():
        cur = await conn.execute(sql, args)
        row = await cur.fetchone()
    assert row is not None
    return row[0]


async def submit(db: Union[psycopg.AsyncConnection, str], workflow: str, context: Optional[Mapping[str, Any]] = None,
                 *, retry: bool = False, retry_for: float = 60.0, **options: Any) -> AsyncRun:
    """wfe.submit, as wfe.submit: in the caller's transaction on an AsyncConnection, or (a conninfo string) in
    one of its own, tried again with the same idempotency key when retry=True.  options: wfe.submit's
    (idempotency_key, tenant, priority, run_deadline_ms, not_before, execution_context, traceparent, options)."""
    if isinstance(db, str):
        if retry:
            return await _submit_retrying(db, workflow, context, retry_for, options)
        async with await psycopg.AsyncConnection.connect(db) as conn:
            run = await submit(conn, workflow, context, **options)
        return dataclasses.replace(run, conninfo=db)
    if retry:
        raise TypeError("submit(retry=True) takes a conninfo string: a transaction that failed cannot be "
                        "retried from inside it (each try needs a connection and a transaction of its own)")
    with translated():
        cur = await db.execute(calls.SUBMIT, calls.submit_args(workflow, context, **options))
        row = await cur.fetchone()
    assert row is not None
    return AsyncRun(int(row[0]), bool(row[1]), _conninfo_of(db))


async def _submit_retrying(conninfo: str, workflow: str, context: Optional[Mapping[str, Any]], retry_for: float,
                           options: Dict[str, Any]) -> AsyncRun:
    """submit in a connection and transaction of its own, tried again until retry_for has passed."""
    options["idempotency_key"] = options.get("idempotency_key") or f"wfe-submit-{uuid.uuid4()}"
    backoff = Backoff(0.2, 5.0)
    give_up = time.monotonic() + retry_for
    tries = 0
    while True:
        tries += 1
        try:
            async with await psycopg.AsyncConnection.connect(conninfo, connect_timeout=10) as conn:
                run = await submit(conn, workflow, context, **options)
            return dataclasses.replace(run, conninfo=conninfo)
        except (psycopg.OperationalError, RetrySubmit) as exc:
            delay = backoff.delay()
            if time.monotonic() + delay > give_up:
                raise
            calls.log.warning("submit %s (key %s): %s; trying again in %.1f s (try %d)", workflow,
                              options["idempotency_key"], first_line(exc), delay, tries + 1)
            await asyncio.sleep(delay)


def _conninfo_of(conn: psycopg.AsyncConnection) -> Optional[str]:
    """A conninfo that connects as conn does (its parameters and password)."""
    try:
        params = conn.info.get_parameters()
        if conn.info.password:
            params["password"] = conn.info.password
        return psycopg.conninfo.make_conninfo(**params)
    except Exception:
        return None


async def report(conn: psycopg.AsyncConnection, run_id: int) -> Dict[str, Any]:
    """wfe.report: the run's execution report (UnknownObject for no such run)."""
    return await _one(conn, "SELECT wfe.report(%s)", (run_id,))


async def cancel_run(conn: psycopg.AsyncConnection, run_id: int, reason: Optional[str] = None) -> Outcome:
    """wfe.cancel_run: ACCEPTED, LATE (the run already had an intent) or UNKNOWN."""
    return Outcome(await _one(conn, "SELECT wfe.cancel_run(%s, %s)", (run_id, reason)))


async def signal(conn: psycopg.AsyncConnection, run_id: int, signal: str, payload: Optional[Mapping[str, Any]] = None,
                 *, idempotency_key: Optional[str] = None) -> Outcome:
    """wfe.signal (as wfe.signal): ACCEPTED, BUFFERED, DUPLICATE, CONFLICT, LATE or UNKNOWN."""
    return Outcome(await _one(conn, "SELECT wfe.signal(%s, %s, %s, %s)",
                              (run_id, signal, Jsonb(dict(payload or {})), idempotency_key)))


async def find_run(conn: psycopg.AsyncConnection, workflow: str, idempotency_key: str,
                   tenant: Optional[str] = None) -> Optional[int]:
    """wfe.find_run: the run of workflow submitted with idempotency_key (None when there is none)."""
    found = await _one(conn, "SELECT wfe.find_run(%s, %s, %s)", (workflow, idempotency_key, tenant))
    return None if found is None else int(found)


class _Waker:
    """What RunWatcher wakes (from its thread): an asyncio.Event, set on its own loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.event = loop, asyncio.Event()

    def set(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass


# the report readers: one AsyncConnection (and a lock) per event loop and conninfo; weakly keyed by the
# loop (not its id(), which a later loop may reuse), so a closed loop's entry goes with it
_readers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Dict[str, Tuple[asyncio.Lock, list]]]" = \
    weakref.WeakKeyDictionary()


async def _read_report(conninfo: str, run_id: int) -> Optional[Dict[str, Any]]:
    """The run's report, or None while PostgreSQL is unreachable."""
    per_loop = _readers.setdefault(asyncio.get_running_loop(), {})
    if conninfo not in per_loop:
        per_loop[conninfo] = (asyncio.Lock(), [None])
    lock, slot = per_loop[conninfo]
    async with lock:
        try:
            if slot[0] is None or slot[0].closed or slot[0].broken:
                slot[0] = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, connect_timeout=10)
            return await report(slot[0], run_id)
        except psycopg.OperationalError:
            if slot[0] is not None:
                await slot[0].close()
            slot[0] = None
            return None


async def wait_for_run(conninfo: str, run_id: int, timeout: Optional[float] = None) -> Dict[str, Any]:
    """The report once run_id is completed, failed or cancelled (as wfe.wait_for_run, awaited): woken by the
    process's one listening connection, which survives a server restart; RunTimeout after timeout."""
    watcher = runs.watcher(conninfo)
    deadline = None if timeout is None else time.monotonic() + timeout
    waker = _Waker(asyncio.get_running_loop())
    watcher.add(run_id, waker)
    try:
        # listen before looking, so an end committed in between is heard (bounded: a server may be away)
        until = time.monotonic() + (min(2.0, timeout) if timeout is not None else 2.0)
        while not watcher.listening and time.monotonic() < until:
            await asyncio.sleep(0.01)
        last: Dict[str, Any] = {}
        while True:
            waker.event.clear()
            rep = await _read_report(conninfo, run_id)
            if rep is not None:
                last = rep
                if rep.get("state") in FINISHED:
                    return rep
            left = LOOK_AGAIN_S if deadline is None else min(LOOK_AGAIN_S, deadline - time.monotonic())
            if left <= 0:
                raise RunTimeout(run_id, last)
            try:  # while the listener is down, look more often: its notifications are lost
                await asyncio.wait_for(waker.event.wait(), left if watcher.listening else min(left, 1.0))
            except asyncio.TimeoutError:
                pass
    finally:
        watcher.remove(run_id, waker)
