"""The worker pool: a bounded set of threads running sync handlers, started as they are needed.

Not concurrent.futures.ThreadPoolExecutor: its threads are joined when the
interpreter exits, so one handler that ignores ``task.stopped`` after the
grace period would keep a stopped worker's process alive.  These threads
are daemons: the process ends when the worker says it is done.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable, List, Optional, Tuple

Job = Optional[Tuple[Callable[..., None], Tuple[Any, ...]]]


class Pool:
    """At most size threads, each running one job after another; jobs beyond wait in order."""

    def __init__(self, size: int, name: str) -> None:
        self.size, self.name = size, name
        self._jobs: "queue.SimpleQueue[Job]" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: List[threading.Thread] = []
        self._idle = 0  # threads waiting for a job

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        """Run fn(*args) on a pool thread (a new one while fewer than size run and none is idle)."""
        with self._lock:
            if self._idle == 0 and len(self._threads) < self.size:
                t = threading.Thread(target=self._work, name=f"{self.name}-{len(self._threads) + 1}", daemon=True)
                self._threads.append(t)
                t.start()
            else:
                self._idle -= 1  # that idle thread takes this job: the next submit must not count it
        self._jobs.put((fn, args))

    @property
    def threads(self) -> int:
        """Threads started so far (never more than size)."""
        return len(self._threads)

    def close(self) -> None:
        """Let every thread end once the jobs queued before are done (does not wait)."""
        for _ in self._threads:
            self._jobs.put(None)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, args = job
            try:
                fn(*args)  # the worker's jobs are supervised: they report their own failures
            finally:
                with self._lock:
                    self._idle += 1
