"""Connections that come back: a backoff, and a PostgreSQL link that reconnects when used."""
from __future__ import annotations

import logging
import random
import threading
from typing import Any, Callable, Optional

import psycopg

log = logging.getLogger("wfe")


def first_line(exc: BaseException) -> str:
    """An error's message, first line only (libpq's messages run over several)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Backoff:
    """Exponential backoff with jitter: first, doubling up to cap (seconds)."""

    def __init__(self, first: float = 0.5, cap: float = 30.0) -> None:
        self.first, self.cap, self.next = first, cap, first

    def delay(self) -> float:
        """The next delay (and double the one after)."""
        d = self.next
        self.next = min(self.cap, self.next * 2)
        return d * random.uniform(0.75, 1.25)

    def reset(self) -> None:
        """After a success: start from the first delay again."""
        self.next = self.first


class Link:
    """One autocommit PostgreSQL connection, opened on first use and again after it broke."""

    def __init__(self, conninfo: str, name: str, stop: Optional[threading.Event] = None,
                 on_notice: Optional[Callable[[Any], None]] = None, *, pooled: bool = False) -> None:
        self.conninfo, self.name = conninfo, name
        self.on_notice = on_notice  # given each server notice (psycopg's Diagnostic) of the connection
        # behind a transaction pooler a prepared statement stays on a server connection we leave
        self.prepare_threshold: Optional[int] = None if pooled else 5
        self.stop = stop or threading.Event()
        self.conn: Optional[psycopg.Connection] = None
        self.backoff = Backoff()
        self._failures = 0

    def get(self) -> psycopg.Connection:
        """The open connection, connecting first if needed (raises OperationalError on failure)."""
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.drop()
            try:
                self.conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10,
                                            prepare_threshold=self.prepare_threshold)
                if self.on_notice is not None:
                    self.conn.add_notice_handler(self.on_notice)
            except psycopg.OperationalError as exc:
                self._failures += 1
                if self._failures == 1 or self._failures % 10 == 0:
                    log.warning("%s: cannot connect to PostgreSQL (failure %d): %s", self.name, self._failures,
                                first_line(exc))
                raise
            if self._failures:
                log.info("%s: connected to PostgreSQL again", self.name)
            self._failures = 0
            self.backoff.reset()
        return self.conn

    def broke(self, exc: BaseException, wait: bool = True) -> None:
        """After an OperationalError: drop the connection and (unless stopping) wait a backoff."""
        log.debug("%s: %s", self.name, exc)
        self.drop()
        if wait:
            self.stop.wait(self.backoff.delay())

    def drop(self) -> None:
        """Close the connection, ignoring errors."""
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn = None
