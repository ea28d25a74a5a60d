"""Waiting for runs: LISTEN wfe_run_done, sent when a run ends (docs/runtime.md).

One RunWatcher per conninfo serves every wait of the process: a thread
holds the one listening connection and wakes the waiters of the runs it
hears of.  When that connection breaks (a server restart), the thread
connects again with a backoff and, once listening, wakes every waiter to
look again, since a notification sent while it was down is lost; waiters
also look every few seconds regardless.  Reports are read on a second
connection, shared under a lock.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional

import psycopg

from . import calls
from ._links import Backoff, Link, first_line
from .errors import WfeError
from .notify import Listener

FINISHED = ("completed", "failed", "cancelled")
Waker = Any  # anything with set(): a threading.Event, or aio's waker of an asyncio.Event
LOOK_AGAIN_S = 5.0  # a waiter reads the report at least this often (safety net)


class RunTimeout(TimeoutError):
    """The timeout passed before the run ended; `report` is its last report ({} if none was read)."""

    def __init__(self, run_id: int, report: Dict[str, Any]) -> None:
        super().__init__(f"run {run_id} has not finished (state {report.get('state')})")
        self.run_id = run_id
        self.report = report


class RunFailed(WfeError):
    """Run.result(): the run ended failed or cancelled; `report` is its report."""

    def __init__(self, run_id: int, report: Dict[str, Any]) -> None:
        super().__init__(f"run {run_id} ended {report.get('state')}"
                         + (f": {report['reason']}" if report.get("reason") else ""))
        self.run_id = run_id
        self.report = report


class RunWatcher:
    """Waits for many runs, from any number of threads, over one LISTEN wfe_run_done connection."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._lock = threading.Lock()
        self._waiters: Dict[int, List[Waker]] = {}
        self._listening = threading.Event()
        self._reports = Link(conninfo, "run reports")
        self._reports_lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self.connects = 0  # how many times the listener connected (1 + reconnects)

    def wait(self, run_id: int, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Block until run_id is completed, failed or cancelled; return its report (RunTimeout after timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        woken = threading.Event()
        self.add(run_id, woken)
        try:
            # listen before looking, so an end committed in between is heard (bounded: a server may be away)
            self._listening.wait(min(2.0, timeout) if timeout is not None else 2.0)
            last: Dict[str, Any] = {}
            while True:
                woken.clear()
                rep = self._report(run_id)
                if rep is not None:
                    last = rep
                    if rep.get("state") in FINISHED:
                        return rep
                left = LOOK_AGAIN_S if deadline is None else min(LOOK_AGAIN_S, deadline - time.monotonic())
                if left <= 0:
                    raise RunTimeout(run_id, last)
                # while the listener is down, look more often: its notifications are lost
                woken.wait(left if self._listening.is_set() else min(left, 1.0))
        finally:
            self.remove(run_id, woken)

    def add(self, run_id: int, waker: Waker) -> None:
        """waker.set() is called when run_id may have ended (and when notifications may have been lost)."""
        with self._lock:
            self._waiters.setdefault(run_id, []).append(waker)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._listen, name="wfe-run-watcher", daemon=True)
                self._thread.start()

    def remove(self, run_id: int, waker: Waker) -> None:
        """Undo add (the listening connection closes once nobody waits)."""
        with self._lock:
            wakers = self._waiters.get(run_id, [])
            if waker in wakers:
                wakers.remove(waker)
            if not wakers:
                self._waiters.pop(run_id, None)

    @property
    def listening(self) -> bool:
        """True while the listening connection is up (else notifications are being lost)."""
        return self._listening.is_set()

    def _report(self, run_id: int) -> Optional[Dict[str, Any]]:
        """The run's report, or None while PostgreSQL is unreachable."""
        with self._reports_lock:
            try:
                return calls.report(self._reports.get(), run_id)
            except psycopg.OperationalError as exc:
                self._reports.broke(exc, wait=False)
                return None

    def _wake(self, run_ids: Optional[List[int]] = None) -> None:
        """Wake the waiters of run_ids (None: of every run)."""
        with self._lock:
            for run_id, events in self._waiters.items():
                if run_ids is None or run_id in run_ids:
                    for e in events:
                        e.set()

    def _listen(self) -> None:
        """The listener thread: hear wfe_run_done, reconnect after a break, end when nobody waits."""
        listener: Optional[Listener] = None
        backoff = Backoff(0.2, 5.0)
        try:
            while True:
                with self._lock:
                    if not self._waiters:
                        self._thread = None
                        self._listening.clear()
                        return
                if listener is None:
                    try:
                        listener = Listener(self.conninfo, ["wfe_run_done"])
                    except psycopg.OperationalError as exc:
                        calls.log.warning("wait_for_run: cannot listen on wfe_run_done (%s); retrying",
                                          first_line(exc))
                        time.sleep(backoff.delay())
                        continue
                    backoff.reset()
                    self.connects += 1
                    self._listening.set()
                    self._wake()  # what ended while nobody listened: look again
                try:
                    got = listener.wait(1.0)
                except psycopg.Error as exc:  # the connection broke (a restart): listen again
                    calls.log.info("wait_for_run: the listening connection broke (%s); listening again",
                                   first_line(exc))
                    self._listening.clear()
                    listener.close()
                    listener = None
                    continue
                ids = [int(p) for ch, p in got if ch == "wfe_run_done" and p.isdigit()]
                if ids:
                    self._wake(ids)
        finally:
            if listener is not None:
                listener.close()


_watchers: Dict[str, RunWatcher] = {}
_watchers_lock = threading.Lock()


def watcher(conninfo: str) -> RunWatcher:
    """The process's RunWatcher for conninfo (one listening connection per database and role)."""
    with _watchers_lock:
        w = _watchers.get(conninfo)
        if w is None:
            w = _watchers[conninfo] = RunWatcher(conninfo)
        return w


def wait_for_run(conninfo: str, run_id: int, timeout: Optional[float] = None) -> Dict[str, Any]:
    """Block until run_id is completed, failed or cancelled; return its report.

    Every call of the process with the same conninfo shares one listening
    connection (RunWatcher), which survives a server restart; RunTimeout
    when timeout seconds pass first.
    """
    return watcher(conninfo).wait(run_id, timeout)
