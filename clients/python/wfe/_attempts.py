"""What happens to an attempt once it is ours: its heartbeats and its one report.

The Reporter sends outcomes on a connection of its own, batching the
completions that queue up meanwhile into one wfe.complete_tasks call; the
Heartbeater renews every running attempt's lease on another, so a long
report never delays a heartbeat.  Both reconnect with a backoff, and resend
what they had in hand: callbacks are idempotent (a report that reached the
server answers duplicate when repeated).  Each thread is supervised: one
that fails for any other reason calls broken(exc, where), which stops the
worker -- a worker that can no longer report or heartbeat must not go on
claiming tasks it would run for nothing.
"""
from __future__ import annotations

import concurrent.futures
import heapq
import itertools
import logging
import queue
import re
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import psycopg

from . import calls
from ._links import Link
from .errors import WfeError
from .outcome import Outcome
from .task import Task

log = logging.getLogger("wfe")

MAX_BATCH = 1000  # wfe.complete_tasks takes at most this many reports
_INVALID = re.compile(r'^stage "(.*)" attempt \d+: invalid_result$')
_RUN = re.compile(r'\bwfe run (\d+)\b')


class Attempt:
    """A task this worker runs, settled exactly once: reported, dropped, or abandoned."""

    def __init__(self, task: Task, on_settled: Optional[Callable[["Attempt"], None]] = None) -> None:
        self.task = task
        self.on_settled = on_settled
        self.started = time.monotonic()
        self.cancel_requested = False
        self.failure = ""  # "code: message" of a failed attempt, for the log line
        self._lock = threading.Lock()
        self._settled = False

    def claim_settlement(self) -> bool:
        """True for the first caller only: it reports (or drops) the attempt."""
        with self._lock:
            if self._settled:
                return False
            self._settled = True
            return True

    @property
    def settled(self) -> bool:
        return self._settled


Broken = Callable[[BaseException, str], None]
"""Called (once) when a thread's machinery fails: the exception and which thread."""


def supervised(loop: Callable[[], None], where: str, broken: Broken) -> Callable[[], None]:
    """loop, with any exception it raises handed to broken instead of silently ending the thread."""
    def run() -> None:
        try:
            loop()
        except BaseException as exc:
            broken(exc, where)
    return run


Report = Tuple[Attempt, str, Any, bool, "concurrent.futures.Future[Outcome]"]
"""(attempt, kind 'complete'|'fail'|'ack_cancel', result or error, retryable, future)."""


class Reporter:
    """A thread that sends reports, completions in batches; each report's Outcome comes back in a Future."""

    def __init__(self, conninfo: str, batch: bool, give_up: threading.Event, broken: Broken, *,
                 pooled: bool = False) -> None:
        self.link = Link(conninfo, "reports", give_up, on_notice=self._notice, pooled=pooled)
        self.batch = batch
        # why the server refused a result (invalid_result), by (run_id, stage): its NOTICE's detail
        self.schema_messages: Dict[Tuple[int, str], str] = {}
        self.give_up = give_up  # set: stop retrying while PostgreSQL is unreachable
        self.q: "queue.Queue[Optional[Report]]" = queue.Queue()
        self.thread = threading.Thread(target=supervised(self._loop, "the reporter", broken), name="wfe-reporter",
                                       daemon=True)
        self.thread.start()

    def _notice(self, diag: Any) -> None:
        """Keep the schema message of an invalid_result (the engine's NOTICE, on this connection)."""
        m = _INVALID.match(diag.message_primary or "")
        r = _RUN.search(diag.context or "")
        if m and r:
            self.schema_messages[(int(r.group(1)), m.group(1))] = diag.message_detail or ""

    def schema_message(self, task: Task) -> str:
        """The schema message the server gave for task's invalid_result ('' when none came)."""
        return self.schema_messages.pop((task.run_id, task.stage), "")

    def send(self, attempt: Attempt, kind: str, payload: Any = None,
             retryable: bool = True) -> "concurrent.futures.Future[Outcome]":
        """Queue a report; the future gets its Outcome (or the error that refused it)."""
        fut: "concurrent.futures.Future[Outcome]" = concurrent.futures.Future()
        self.q.put((attempt, kind, payload, retryable, fut))
        return fut

    def close(self, timeout: float) -> None:
        """Send what is queued (for up to timeout seconds when PostgreSQL is away), then stop."""
        self.q.put(None)
        self.thread.join(timeout)
        self.give_up.set()
        self.thread.join(2)
        self.link.drop()

    def _loop(self) -> None:
        done = False
        while not done:
            item = self.q.get()
            if item is None:
                break
            items = [item]
            while len(items) < MAX_BATCH:  # whatever queued up meanwhile goes in the same round
                try:
                    more = self.q.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    done = True
                    break
                items.append(more)
            self._send(items)
        # stopping: answer what is left so no waiter hangs
        while True:
            try:
                item = self.q.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                self._send([item])

    def _send(self, items: List[Report]) -> None:
        """Send a round's reports until they are answered, PostgreSQL permitting."""
        while items:
            try:
                db = self.link.get()
                items = self._send_on(db, items)
            except psycopg.OperationalError as exc:
                if self.give_up.is_set():
                    for *_, fut in items:
                        if not fut.done():
                            fut.set_exception(exc)
                    return
                log.warning("reports: PostgreSQL is unreachable, %d report(s) kept for later", len(items))
                self.link.broke(exc)

    def _send_on(self, db: psycopg.Connection, items: List[Report]) -> List[Report]:
        """Send on one connection; return the reports still unanswered (none, unless it raised)."""
        completes = [it for it in items if it[1] == "complete"]
        others = [it for it in items if it[1] != "complete"]
        if self.batch and len(completes) > 1:
            try:
                answers = calls.complete_tasks(db, [(it[0].task, it[2]) for it in completes])
            except WfeError:
                answers = None  # one report spoilt the batch: send them one by one
            except psycopg.DataError:
                answers = None
            if answers is not None:
                for it in completes:
                    it[4].set_result(answers[(it[0].task.run_id, it[0].task.stage)])
                completes = []
        for n, it in enumerate(completes + others):
            attempt, kind, payload, retryable, fut = it
            try:
                if kind == "complete":
                    fut.set_result(calls.complete_task(db, attempt.task, payload))
                elif kind == "fail":
                    fut.set_result(calls.fail_task(db, attempt.task, payload, retryable))
                else:
                    fut.set_result(calls.ack_cancel(db, attempt.task))
            except psycopg.OperationalError:
                return (completes + others)[n:]
            except (WfeError, psycopg.Error) as exc:
                fut.set_exception(exc)
        return []


class Heartbeater:
    """A thread that heartbeats each running attempt at its own rhythm, on its own connection."""

    def __init__(self, conninfo: str, stop: threading.Event, broken: Broken, *, pooled: bool = False) -> None:
        self.link = Link(conninfo, "heartbeats", stop, pooled=pooled)
        self.stop = stop
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.due: List[Tuple[float, int, Attempt, float]] = []  # (when, seq, attempt, interval)
        self.seq = itertools.count()
        self.lost: Callable[[Attempt, Outcome], None] = lambda a, o: None
        self.thread = threading.Thread(target=supervised(self._loop, "the heartbeats", broken), name="wfe-heartbeats",
                                       daemon=True)
        self.thread.start()

    def add(self, attempt: Attempt, interval: float) -> None:
        """Heartbeat attempt every interval seconds until it is settled."""
        with self.lock:
            heapq.heappush(self.due, (time.monotonic() + interval, next(self.seq), attempt, interval))
        self.wake.set()

    def _loop(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                now = time.monotonic()
                ready = []
                while self.due and (self.due[0][2].settled or self.due[0][0] <= now):
                    entry = heapq.heappop(self.due)
                    if not entry[2].settled:
                        ready.append(entry)
                wait = (self.due[0][0] - now) if self.due else 1.0
            for when, _, attempt, interval in ready:
                again = self._beat(attempt)
                if again:
                    with self.lock:
                        heapq.heappush(self.due, (time.monotonic() + (interval if again is True else 0.5),
                                                  next(self.seq), attempt, interval))
            if not ready:
                self.wake.wait(max(0.01, min(wait, 1.0)))
                self.wake.clear()

    def _beat(self, attempt: Attempt) -> Any:
        """One heartbeat: True to go on, 'soon' to retry after a lost connection, False when it is over."""
        if attempt.settled:
            return False
        try:
            answer = calls.heartbeat(self.link.get(), attempt.task)
        except psycopg.OperationalError as exc:
            self.link.broke(exc, wait=False)
            return "soon"
        except (WfeError, psycopg.Error) as exc:
            log.warning("run %s stage %s attempt %s: heartbeat refused: %s", attempt.task.run_id,
                        attempt.task.stage, attempt.task.attempt, exc)
            return True
        if answer is Outcome.ACCEPTED:
            return True
        self.lost(attempt, answer)
        return False
