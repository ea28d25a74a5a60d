"""LISTEN/NOTIFY with a timeout on psycopg 3.1 and later.

psycopg 3.1 has no ``notifies(timeout=...)``: waiting is done here on the
connection's socket with select(), then libpq's input is consumed and its
notifications read.  Use the connection for nothing else while listening,
so that no query consumes a notification meant for the waiter.
"""
from __future__ import annotations

import os
import select
import time
from typing import Callable, List, Optional, Sequence, Tuple

import psycopg

Notification = Tuple[str, str]
"""(channel, payload)."""


class Listener:
    """An autocommit connection LISTENing on some channels, with a wait that can time out."""

    def __init__(self, conninfo: str, channels: Sequence[str]) -> None:
        self.conn = psycopg.connect(conninfo, autocommit=True)
        self._early: List[Notification] = []
        # notifications that arrive while LISTEN itself runs are dispatched to handlers
        self.conn.add_notify_handler(lambda n: self._early.append((n.channel, n.payload)))
        for channel in channels:
            self.conn.execute(f"LISTEN {psycopg.sql.Identifier(channel).as_string(self.conn)}")

    def fileno(self) -> int:
        """The socket, for a caller that selects on more than this connection."""
        return self.conn.fileno()

    def drain(self) -> List[Notification]:
        """Every notification received so far, without waiting (raises OperationalError if the link broke)."""
        pgconn = self.conn.pgconn
        pgconn.consume_input()
        out, self._early = self._early, []
        while True:
            n = pgconn.notifies()
            if n is None:
                return out
            out.append((n.relname.decode(), n.extra.decode()))

    def wait(self, timeout: float, wanted: Callable[[Notification], bool] = lambda n: True,
             wake_fd: Optional[int] = None) -> List[Notification]:
        """Wait up to timeout seconds for a wanted notification (or wake_fd readable); return what came."""
        deadline = time.monotonic() + timeout
        got: List[Notification] = []
        while True:
            got += self.drain()
            if any(wanted(n) for n in got):
                return got
            left = deadline - time.monotonic()
            if left <= 0:
                return got
            fds = [self.conn.fileno()] + ([wake_fd] if wake_fd is not None else [])
            ready, _, _ = select.select(fds, [], [], left)
            if wake_fd is not None and wake_fd in ready:
                try:
                    os.read(wake_fd, 4096)
                except BlockingIOError:  # another waiter took the byte
                    pass
                return got + self.drain()

    def close(self) -> None:
        """Close the connection (ignoring errors: it may be broken already)."""
        try:
            self.conn.close()
        except Exception:
            pass
