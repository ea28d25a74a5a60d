"""The poll loop: LISTEN wfe_task_ready (unless pooled), claim in batches up to the free slots, wait without spinning."""
from __future__ import annotations

import logging
import os
import select
import time
from typing import List, Optional

import psycopg

from . import calls
from ._links import Backoff, Link, first_line
from .errors import PermissionDenied, WfeError
from .notify import Listener
from .worker import Worker

log = logging.getLogger("wfe")


class PollLoop:
    """Claims the tasks of some poll queues for a Worker.

    One connection listens (and does nothing else, so no query eats a
    notification); another claims.  A claim asks for as many tasks as there
    are free slots; when it gets fewer the queue is drained, and the loop
    waits for a notification for one of its queues, a slot to free up, or
    poll_interval_s (the safety net: no notification is sent while
    wfe.notify is off, and one sent while the listener was down is lost).
    A notification carries a queue's keyed tag, not its name (any login may
    LISTEN): the loop asks wfe.ready_tag for its queues' tags each time it
    listens anew.
    """

    def __init__(self, worker: Worker, queues: List[str], once: bool) -> None:
        self.w, self.queues, self.once = worker, queues, once
        self.claims = Link(worker.conninfo, "claims", worker.hard_stop, pooled=worker.pooled)
        self.listener: Optional[Listener] = None
        self.tags: set = set()  # the wfe_task_ready payloads of our queues
        self.backoff = Backoff()

    def run(self) -> None:
        """Until the worker stops (or, with once, until nothing is left)."""
        try:
            while not self.w.stopping.is_set():
                try:
                    if self.listener is None and not self.w.pooled:
                        # listen first: a task released after this is announced to us
                        self.listener = Listener(self.w.conninfo, ["wfe_task_ready"])
                        self.tags = self._tags()
                    drained = self._claim_round()
                    self.backoff.reset()
                    if self.once and drained and self.w.busy() == 0:
                        return
                    if drained or self.w.free_slots() == 0:
                        self._wait()
                except psycopg.OperationalError as exc:
                    log.warning("poll: PostgreSQL is unreachable (%s); retrying", first_line(exc))
                    self._drop()
                    self.w.stopping.wait(self.backoff.delay())
                    continue
                except WfeError as exc:  # e.g. the queue is in broker mode, or not known
                    if self.once:
                        raise
                    log.error("poll: %s (%s); trying again in %.0f s", exc, exc.sqlstate, self.w.poll_interval_s)
                    self.w.stopping.wait(self.w.poll_interval_s)
                    continue
        finally:
            self._drop()

    def _claim_round(self) -> bool:
        """Claim from each queue while slots are free; True when every queue came back short."""
        drained = True
        for queue in self.queues:
            free = self.w.free_slots()
            if free <= 0 or self.w.stopping.is_set():
                return False
            tasks = calls.claim_task(self.claims.get(), queue, self.w.worker_id, free, self.w.lease_ms)
            if tasks:
                log.debug("poll: claimed %d task(s) of %s", len(tasks), queue)
            for task in tasks:
                self.w.start(task)
            if len(tasks) == free:
                drained = False
        return drained

    def _wait(self) -> None:
        """Until a notification for one of our queues, a freed slot or stopping; at most poll_interval_s."""
        until = time.monotonic() + self.w.poll_interval_s
        while not self.w.stopping.is_set():
            left = until - time.monotonic()
            if left <= 0:
                return
            if self.listener is None:  # pooled: nothing to listen to, only a freed slot or stopping
                if select.select([self.w._wake_r], [], [], left)[0]:
                    try:
                        os.read(self.w._wake_r, 4096)
                    except BlockingIOError:  # another waiter took the byte
                        pass
                if self.w.free_slots() > 0:
                    return
                continue
            got = self.listener.wait(left, lambda n: n[1] in self.tags, wake_fd=self.w._wake_r)
            if any(n[1] in self.tags for n in got) or self.w.free_slots() > 0:
                return

    def _tags(self) -> set:
        """Our queues' tags; a queue we may not claim from has none (its claim says why)."""
        tags = set()
        for queue in self.queues:
            try:
                tags.add(calls.ready_tag(self.claims.get(), queue))
            except PermissionDenied:
                pass
        return tags

    def _drop(self) -> None:
        if self.listener is not None:
            self.listener.close()
        self.listener = None
        self.claims.drop()
