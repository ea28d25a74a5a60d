"""Workers: handlers registered per worker contract, run by a poll loop or a broker loop.

    app = wfe.Worker("dbname=shop")

    @app.handler("thumbnail.render@3", queue="rendering")
    def render(task: wfe.Task) -> dict:
        return {"url": make_thumbnail(task.input["modelId"])}

    app.run()                     # poll mode; mode="broker" consumes RabbitMQ

A handler takes a Task and returns the JSON result; raising fails the
attempt (wfe's retry policy decides what next; raise wfe.Fail(...,
retryable=False) when trying again cannot help).  The same handler serves
both delivery modes.  Sync handlers run on a pool of at most `concurrency`
threads; ``async def`` handlers run on one event loop (the worker's own, or
the caller's under ``await app.serve()``).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import inspect
import logging
import os
import signal
import socket
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import psycopg

from . import _result, _trace, _typed
from ._attempts import Attempt, Heartbeater, Reporter
from ._pool import Pool
from ._links import Link
from .errors import WfeError
from .outcome import Outcome
from .task import JSON, Fail, Task

log = logging.getLogger("wfe")

Handler = Callable[[Task], Any]  # a JSON value, a typed result, or (async def) an awaitable of one
MODES = ("poll", "broker")
CHOICES = MODES + ("auto",)  # auto: the queue's delivery mode as wfe.configure_queue set it


class Worker:
    """A worker process's handlers and the loops that feed them.

    conninfo: libpq connection string of a role with wfe_worker (and the queues' grants).
    worker_id: recorded as the attempts' claimed_by (default host:pid).
    concurrency: handlers running at once (sync ones on a pool of this many threads, async ones on
        one event loop); the claim size, or the broker prefetch.
    queue_concurrency: queue -> the most handlers of that queue running at once (within concurrency).
    lease_ms: the lease each claim (poll) or accept_task (broker) asks for, renewed by heartbeats
        while the handler runs, so a worker that dies loses its tasks to a retry after at most
        this long (None: the stage's execution deadline).
    heartbeat_s: the longest silence between heartbeats (default: a third of the lease or of
        the stage's heartbeat_ms, whichever is shorter, else 30 s).
    grace_s: on SIGTERM, how long running handlers may take before they are reported
        failed with worker.shutdown (retryable) and abandoned.
    pooled: the conninfo leads to a connection pooler in transaction mode (pgbouncer's
        pool_mode=transaction): no server-side prepared statements (psycopg's prepare_threshold
        is None), and poll mode does not LISTEN but claims every poll_interval_s.
    amqp_url: broker mode's RabbitMQ (default $WFE_AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/).
    """

    def __init__(self, conninfo: str = "", *, worker_id: Optional[str] = None, concurrency: int = 4,
                 lease_ms: Optional[int] = 30000, heartbeat_s: Optional[float] = None,
                 grace_s: float = 10.0, poll_interval_s: float = 5.0, batch_reports: bool = True,
                 amqp_url: Optional[str] = None, declare: bool = False,
                 max_redeliveries: Optional[int] = None, pooled: bool = False,
                 queue_concurrency: Optional[Mapping[str, int]] = None) -> None:
        if concurrency < 1 or concurrency > 1000:
            raise ValueError(f"concurrency must be between 1 and 1000, not {concurrency}")
        self.queue_concurrency: Dict[str, int] = {}
        for q, n in (queue_concurrency or {}).items():
            self._limit(q, n)
        if lease_ms is not None and lease_ms < 1:
            raise ValueError(f"lease_ms must be positive, not {lease_ms}")
        self.conninfo = conninfo
        self.pooled = pooled
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.heartbeat_s = heartbeat_s
        self.grace_s = grace_s
        self.poll_interval_s = poll_interval_s
        self.batch_reports = batch_reports
        self.amqp_url = amqp_url or os.environ.get("WFE_AMQP_URL") or "amqp://guest:guest@127.0.0.1:5672/"
        self.declare = declare
        self.max_redeliveries = max_redeliveries
        self._handlers: Dict[str, Handler] = {}
        self._types: Dict[str, Tuple[Optional[type], Optional[type]]] = {}  # contract -> (input, output) types
        self._per_queue: Dict[str, int] = {}  # queue -> handlers running
        self.freed = 0  # slots freed so far: a loop waiting for a slot compares it
        self.pool: Optional[Pool] = None
        self.aloop: Optional[asyncio.AbstractEventLoop] = None  # where async handlers run
        self._own_aloop = False
        self._queues: Dict[str, Optional[str]] = {}  # queue -> mode given with a handler
        self.stopping = threading.Event()  # no new tasks
        self.hard_stop = threading.Event()  # the grace period is over
        self._running: Dict[Tuple[int, str, int, int], Attempt] = {}
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        # never block a writer: nobody reads the pipe while no poll loop waits (broker mode)
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        self._idle = threading.Condition(self._lock)
        self._reporting = 0
        self.reporter: Optional[Reporter] = None
        self.heartbeats: Optional[Heartbeater] = None
        self.counts: Dict[str, int] = {}
        self.errors: List[BaseException] = []  # what broke the worker's machinery; run() raises the first
        self.max_result_bytes = 64 * 1024 * 1024  # the server's wfe.max_payload_bytes, read by run()
        self.max_result_depth = 64  # the server's wfe.max_json_depth

    # --- the registry --------------------------------------------------------

    def handler(self, contract: str, *, queue: Optional[str] = None, mode: Optional[str] = None,
                concurrency: Optional[int] = None, input: Optional[type] = None,
                output: Optional[type] = None) -> Callable[[Handler], Handler]:
        """Decorator: fn (a function or an ``async def``) handles the tasks of contract (``name@N``, or
        ``name`` for every version); queue (and its delivery mode) adds the queue to what run() serves,
        concurrency caps that queue's handlers running at once; input and output (a dataclass or a
        pydantic model; output defaults to fn's return annotation when it is one) type task.input and
        check the result before it is reported."""
        def register(fn: Handler) -> Handler:
            self.register(contract, fn, queue=queue, mode=mode, concurrency=concurrency, input=input, output=output)
            return fn
        return register

    def register(self, contract: str, fn: Handler, *, queue: Optional[str] = None,
                 mode: Optional[str] = None, concurrency: Optional[int] = None,
                 input: Optional[type] = None, output: Optional[type] = None) -> None:
        """Register fn for contract (see handler)."""
        if contract in self._handlers:
            raise ValueError(f"a handler for {contract} is registered already")
        if mode is not None and mode not in CHOICES:
            raise ValueError(f"mode must be auto, poll or broker, not {mode!r}")
        for what, tp in (("input", input), ("output", output)):
            if tp is not None and not _typed.is_model(tp):
                raise TypeError(f"{what}= takes a dataclass or a pydantic model, not {tp!r}")
        if concurrency is not None:
            if queue is None:
                raise ValueError("concurrency= caps a queue: give queue= too")
            self._limit(queue, concurrency)
        self._handlers[contract] = fn
        self._types[contract] = (input, output or _typed.return_type(fn))
        if queue is not None:
            if self._queues.get(queue) not in (None, mode) and mode is not None:
                raise ValueError(f"queue {queue} is given both modes")
            self._queues[queue] = mode or self._queues.get(queue)

    def _limit(self, queue: str, n: int) -> None:
        """Cap queue's handlers running at once."""
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"the concurrency of queue {queue} must be a positive integer, not {n!r}")
        self.queue_concurrency[queue] = n

    def handler_for(self, task: Task) -> Optional[Handler]:
        """The handler of the task's contract: its exact ref first, then its name."""
        return self._handlers.get(task.contract) or self._handlers.get(task.contract_name)

    def _types_for(self, task: Task) -> Tuple[Optional[type], Optional[type]]:
        """The (input, output) types of the task's handler (Nones when untyped)."""
        key = task.contract if task.contract in self._handlers else task.contract_name
        return self._types.get(key, (None, None))

    # --- running -------------------------------------------------------------

    def run(self, queues: Optional[Sequence[str]] = None, *, mode: Union[str, Mapping[str, str], None] = None,
            once: bool = False) -> None:
        """Serve queues (default: the queues given with the handlers) until stop() or SIGTERM.

        mode: "poll" (default), "broker", or a mapping queue -> mode.  once: return when there
        is nothing left to do (poll: a claim found nothing and nothing runs; broker: nothing
        delivered for 2 s and nothing runs).
        """
        plan = self._plan(queues, mode)
        if not self._handlers:
            raise ValueError("no handler is registered")
        plan = self._resolve(plan)
        self._install_signals()
        from . import poll, broker  # the loops import this module
        self.reporter = Reporter(self.conninfo, self.batch_reports, self.hard_stop, self.broken, pooled=self.pooled)
        self.heartbeats = Heartbeater(self.conninfo, self.hard_stop, self.broken, pooled=self.pooled)
        self.heartbeats.lost = self._lost
        self._read_limits()
        try:  # connect now: a first heartbeat that must connect first may come too late for a short heartbeat_ms
            self.heartbeats.link.get()
        except psycopg.OperationalError:
            pass  # PostgreSQL away at start: the heartbeater connects when it can
        self.pool = Pool(self.concurrency, "wfe-handler")
        if any(_is_async(fn) for fn in self._handlers.values()) and self.aloop is None:
            self._start_aloop()
        loops: List[threading.Thread] = []

        def guard(fn: Callable[[], None], name: str) -> Callable[[], None]:
            def run_it() -> None:
                try:
                    fn()
                except (KeyboardInterrupt, SystemExit) as exc:
                    self.errors.append(exc)
                    self.stop()
                except BaseException as exc:  # a loop that cannot go on stops the worker
                    self.broken(exc, name)
            return run_it

        poll_queues = [q for q, m in plan.items() if m == "poll"]
        broker_queues = [q for q, m in plan.items() if m == "broker"]
        log.info("wfe worker %s: %s, concurrency %d", self.worker_id,
                 ", ".join(f"{q} ({m})" for q, m in plan.items()), self.concurrency)
        if poll_queues:
            loops.append(threading.Thread(target=guard(lambda: poll.PollLoop(self, poll_queues, once).run(), "the poll loop"),
                                          name="wfe-poll", daemon=True))
        if broker_queues:
            loops.append(threading.Thread(target=guard(lambda: broker.BrokerLoop(self, broker_queues, once).run(), "the broker loop"),
                                          name="wfe-broker", daemon=True))
        for t in loops:
            t.start()
        while any(t.is_alive() for t in loops) and not self.stopping.is_set():
            for t in loops:
                t.join(0.2)
        self._shutdown(loops)
        if self.errors and not isinstance(self.errors[0], (KeyboardInterrupt, SystemExit)):
            raise self.errors[0]

    async def serve(self, queues: Optional[Sequence[str]] = None, *,
                    mode: Union[str, Mapping[str, str], None] = None, once: bool = False) -> None:
        """run(), from asyncio: async handlers run on the caller's event loop (sharing its sessions and
        clients), the loops and sync handlers in threads.  Cancelling it stops the worker (grace_s applies);
        SIGTERM and SIGINT stop it when the event loop runs in the main thread."""
        loop = asyncio.get_running_loop()
        self.aloop, self._own_aloop = loop, False
        signals = []
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self.stop)
                    signals.append(sig)
                except (NotImplementedError, RuntimeError):
                    pass
        done = loop.run_in_executor(None, lambda: self.run(queues, mode=mode, once=once))
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            self.stop()
            await done
            raise
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            self.aloop = None  # a later run() must not use this loop, which may be gone by then

    def _start_aloop(self) -> None:
        """An event loop of the worker's own, in a thread, for its async handlers."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run_loop() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
        threading.Thread(target=run_loop, name="wfe-asyncio", daemon=True).start()
        ready.wait()
        self.aloop, self._own_aloop = loop, True

    def broken(self, exc: BaseException, where: str) -> None:
        """Part of the worker's own machinery failed (where: e.g. "the reporter"): stop at once, claim
        nothing more, and let run() raise exc -- a worker that cannot report must not keep claiming."""
        self.errors.append(exc)
        log.critical("wfe worker %s: %s failed, stopping: %s: %s", self.worker_id, where, type(exc).__name__, exc)
        log.debug("%s", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        self.stopping.set()
        self.hard_stop.set()  # no grace: the running tasks' reports could not be sent anyway
        self.wake()

    def _read_limits(self) -> None:
        """The server's result limits (wfe.max_payload_bytes, wfe.max_json_depth), checked before reporting."""
        from . import calls
        assert self.reporter is not None
        try:
            db = self.reporter.link.get()
            size, depth = calls.setting(db, "wfe.max_payload_bytes"), calls.setting(db, "wfe.max_json_depth")
        except psycopg.Error as exc:  # PostgreSQL away at start: the defaults; the server still has the last word
            log.debug("result limits: %s", exc)
            return
        if size:
            self.max_result_bytes = int(size)
        if depth:
            self.max_result_depth = int(depth)

    def stop(self) -> None:
        """Take no new tasks; running handlers get grace_s to finish.  A second call ends the grace."""
        if self.stopping.is_set():
            self.hard_stop.set()
        self.stopping.set()
        self.wake()

    def wake(self) -> None:
        """Wake a poll loop waiting for notifications (a slot freed, stopping)."""
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _plan(self, queues: Optional[Sequence[str]], mode: Union[str, Mapping[str, str], None]) -> Dict[str, str]:
        """queue -> mode for this run."""
        names = list(queues) if queues else list(self._queues)
        if not names:
            raise ValueError("no queue to serve: give run(queues=...) or handler(..., queue=...)")
        plan = {}
        for q in names:
            m = mode.get(q) if isinstance(mode, Mapping) else mode
            m = m or self._queues.get(q) or "auto"
            if m not in CHOICES:
                raise ValueError(f"mode must be auto, poll or broker, not {m!r}")
            plan[q] = m
        return plan

    def _resolve(self, plan: Dict[str, str]) -> Dict[str, str]:
        """The plan with each queue's mode as the server has it (wfe.queue_delivery): "auto" takes it, a
        mode given that differs is one clear error (a poll worker on a broker queue would wait forever)."""
        from . import calls
        link = Link(self.conninfo, "queues", self.stopping, pooled=self.pooled)
        while True:  # PostgreSQL may come up after the worker: wait for it, as every loop does
            try:
                served = {q: calls.queue_delivery(link.get(), q) for q in plan}
                break
            except psycopg.OperationalError as exc:
                link.broke(exc)
        link.drop()
        wrong = [f"{q} (a {served[q]} queue) in {m} mode" for q, m in plan.items() if m != "auto" and m != served[q]]
        if wrong:
            raise ValueError(f"cannot serve {'; '.join(wrong)} (wfe.configure_queue sets a queue's mode): "
                             "give mode=\"auto\" or the queue's mode")
        resolved = {q: served[q] for q in plan}
        if "broker" in resolved.values():
            # checked here: a missing pika is one error at start, not a loop that dies later
            if importlib.util.find_spec("pika") is None:
                raise ValueError(f"cannot serve the broker queue(s) {', '.join(q for q, m in resolved.items() if m == 'broker')}: "
                                 "broker mode needs pika (pip install 'wfe[broker]', or Debian's python3-pika)")
        return resolved

    def _install_signals(self) -> None:
        """SIGTERM and SIGINT stop the worker (a second one ends the grace period); main thread only."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: self.stop())

    # --- one attempt ---------------------------------------------------------

    def free_slots(self, queue: Optional[str] = None) -> int:
        """How many more handlers may start now (of queue, when given: within its cap too)."""
        with self._lock:
            free = self.concurrency - len(self._running)
            cap = self.queue_concurrency.get(queue) if queue is not None else None
            if cap is not None:
                free = min(free, cap - self._per_queue.get(queue, 0))
            return free

    def running(self) -> int:
        """Handlers running now."""
        with self._lock:
            return len(self._running)

    def busy(self) -> int:
        """Handlers running plus outcomes not yet answered: zero when nothing is left in hand."""
        with self._lock:
            return len(self._running) + self._reporting

    def start(self, task: Task, on_settled: Optional[Callable[[Attempt], None]] = None) -> Attempt:
        """Run task's handler (sync: on the pool; async: on the event loop), heartbeating it, and report
        its outcome."""
        attempt = Attempt(task, on_settled)
        with self._lock:
            self._running[task.ids] = attempt
            self._per_queue[task.queue] = self._per_queue.get(task.queue, 0) + 1
        assert self.heartbeats is not None and self.pool is not None
        self.heartbeats.add(attempt, self._beat_interval(task))
        fn = self.handler_for(task)
        if fn is not None and _is_async(fn) and self.aloop is not None:
            fut = asyncio.run_coroutine_threadsafe(self._execute_async(attempt, fn), self.aloop)
            fut.add_done_callback(lambda f: self._async_done(attempt, f))
        else:
            self.pool.submit(self._supervised, attempt)
        return attempt

    def _async_done(self, attempt: Attempt, fut: "concurrent.futures.Future[None]") -> None:
        """An async attempt's coroutine ended: a failure outside the handler breaks the worker."""
        exc = None if fut.cancelled() else fut.exception()
        if exc is not None:
            self.broken(exc, f"the coroutine of run {attempt.task.run_id} stage {attempt.task.stage}")

    def find(self, ids: Tuple[int, str, int, int]) -> Optional[Attempt]:
        """The running attempt with these ids, if it runs here."""
        with self._lock:
            return self._running.get(ids)

    def _beat_interval(self, task: Task) -> float:
        """Seconds between heartbeats: a third of the shortest window that must be renewed."""
        if self.heartbeat_s is not None:
            return self.heartbeat_s
        windows = [w for w in (task.heartbeat_ms, self.lease_ms) if w]
        return max(0.05, min(windows) / 3000.0) if windows else 30.0

    def _supervised(self, attempt: Attempt) -> None:
        """The handler's thread: _execute, and a failure outside the handler breaks the worker."""
        try:
            self._execute(attempt)
        except BaseException as exc:
            self.broken(exc, f"the thread of run {attempt.task.run_id} stage {attempt.task.stage}")

    def _execute(self, attempt: Attempt) -> None:
        """A sync handler, on a pool thread: prepare the input, run it, make its result JSON text here
        (a bad one fails the attempt with result.refused), then report (unless the attempt was lost)."""
        task = attempt.task
        fn = self.handler_for(task)
        try:
            arg = self._prepare(task, fn)
            with _trace.span(task):
                value = fn(arg)  # type: ignore[misc]
            outcome = self._result(task, value)
        except BaseException as exc:  # SystemExit from a handler fails its attempt, not the worker
            outcome = self._failure(task, exc)
        self._conclude(attempt, *outcome)

    async def _execute_async(self, attempt: Attempt, fn: Handler) -> None:
        """An async handler, on the event loop: as _execute; what blocks (fetching a large input, encoding
        the result) runs in the loop's default executor, not on the loop."""
        task = attempt.task
        attempt.aio_task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        try:
            if task.stopped.is_set():
                raise asyncio.CancelledError()
            arg = await loop.run_in_executor(None, self._prepare, task, fn)
            with _trace.span(task):
                value = await fn(arg)
            outcome = await loop.run_in_executor(None, self._result, task, value)
        except BaseException as exc:  # CancelledError: the attempt stopped being ours (it is not reported)
            outcome = self._failure(task, exc)
        self._conclude(attempt, *outcome)

    def _prepare(self, task: Task, fn: Optional[Handler]) -> Task:
        """The task as the handler takes it: a handler there, the input fetched (large track) and typed."""
        if fn is None:
            raise Fail("worker.no_handler", f"this worker has no handler for {task.contract}")
        if task.input is None and task.payload_ref is not None:
            try:
                task.input = self._fetch(task)
            except (WfeError, psycopg.Error) as exc:
                raise Fail("payload.unavailable", f"the input could not be fetched: {exc}") from exc
        tp = self._types_for(task)[0]
        if tp is not None:
            try:
                task.input = _typed.load(tp, task.input)
            except _typed.TypeMismatch as exc:  # the same input fails again: no retry
                raise Fail("input.invalid", f"the input is not a {tp.__name__}: {exc}", retryable=False) from None
        return task

    def _result(self, task: Task, value: Any) -> Tuple[str, Any, bool]:
        """("complete", JSON text) of a handler's value: checked against its output type, serialised, measured."""
        try:
            value = _typed.dump(self._types_for(task)[1], value)
        except _typed.TypeMismatch as exc:
            raise _result.ResultRefused(f"the result does not fit its type: {exc}") from None
        return "complete", _result.encode(value, self.max_result_bytes, self.max_result_depth), True

    def _failure(self, task: Task, exc: BaseException) -> Tuple[str, Any, bool]:
        """("fail", error, retryable) of what a handler raised."""
        if isinstance(exc, _result.ResultRefused):
            return "fail", {"code": "result.refused", "message": str(exc)}, True
        if isinstance(exc, Fail):
            return "fail", exc.error(), exc.retryable
        if isinstance(exc, asyncio.CancelledError):
            return "fail", {"code": "worker.cancelled", "message": "the handler was cancelled"}, True
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        log.debug("run %s stage %s attempt %s: the handler raised:\n%s", task.run_id, task.stage, task.attempt, trace)
        return "fail", {"code": type(exc).__name__, "message": str(exc)[:2000], "traceback": trace[-4000:]}, True

    def _conclude(self, attempt: Attempt, kind: str, payload: Any, retryable: bool) -> None:
        """Report the handler's outcome, acknowledge a cancellation, or drop an attempt no longer ours."""
        if kind == "fail":
            attempt.failure = f"{payload.get('code')}: {payload.get('message')}"
            payload = self._error_text(payload)
        if attempt.cancel_requested:
            self._settle(attempt, "ack_cancel")
        elif attempt.task.stopped.is_set():
            self._settle(attempt, None)  # the attempt is not ours any more: nothing to report
        else:
            self._settle(attempt, kind, payload, retryable)

    @staticmethod
    def _error_text(error: Dict[str, object]) -> _result.JsonText:
        """The error as JSON text; details that are not JSON are dropped (code and message stay)."""
        try:
            return _result.encode(error, 1024 * 1024, 64)
        except _result.ResultRefused:
            return _result.encode({"code": str(error.get("code")), "message": str(error.get("message"))[:2000]},
                                  1024 * 1024, 64)

    def _fetch(self, task: Task) -> JSON:
        """A large input, by reference (wfe.fetch_payload), on the reporter's connection."""
        from . import calls
        assert self.reporter is not None
        return calls.fetch_payload(self.reporter.link.get(), task.payload_ref or {})

    def _settle(self, attempt: Attempt, kind: Optional[str], payload: JSON = None, retryable: bool = True,
                claimed: bool = False) -> None:
        """Report the attempt's outcome once (kind None: report nothing), then let it go;
        claimed: the caller has won the settlement already."""
        if not claimed and not attempt.claim_settlement():
            return
        with self._lock:
            # the handler's slot is free now: the next claim overlaps this report
            if self._running.pop(attempt.task.ids, None) is not None:
                self._per_queue[attempt.task.queue] -= 1
            self.freed += 1
            self._reporting += 1
            self._idle.notify_all()
        self.wake()
        if kind is None:
            self._reported(attempt, None, None)
        else:
            self._send(attempt, kind, payload, retryable)

    def _send(self, attempt: Attempt, kind: str, payload: JSON, retryable: bool) -> None:
        """Queue a report; its answer arrives in _answered (on the reporter's thread)."""
        assert self.reporter is not None
        fut = self.reporter.send(attempt, kind, payload, retryable)
        fut.add_done_callback(lambda f: self._answered(attempt, kind, f))

    def _answered(self, attempt: Attempt, kind: str, fut: "concurrent.futures.Future[Outcome]") -> None:
        """A report's answer; a result the server refuses (too large, not storable JSON) fails the attempt."""
        task = attempt.task
        outcome: Optional[Outcome] = None
        try:
            outcome = fut.result()
        except psycopg.OperationalError as exc:
            log.warning("run %s stage %s attempt %s: the outcome could not be reported (PostgreSQL unreachable): %s",
                        task.run_id, task.stage, task.attempt, exc)
        except (WfeError, psycopg.Error) as exc:
            if kind == "complete":
                attempt.failure = f"result.refused: {exc}"
                self._send(attempt, "fail", {"code": "result.refused", "message": str(exc)[:2000]}, True)
                return
            log.warning("run %s stage %s attempt %s: %s refused: %s", task.run_id, task.stage, task.attempt, kind, exc)
        self._reported(attempt, kind, outcome)

    def _reported(self, attempt: Attempt, kind: Optional[str], outcome: Optional[Outcome]) -> None:
        """The attempt is done with: log it, count it, and (broker) acknowledge its message."""
        task = attempt.task
        took = (time.monotonic() - attempt.started) * 1000
        word = kind if kind in ("complete", "fail") else ("cancel acknowledged" if kind else "dropped")
        if outcome is Outcome.INVALID_RESULT:  # the attempt failed as result.schema: say why
            why = self.reporter.schema_message(task) if self.reporter is not None else ""
            log.warning("run %s stage %s attempt %s: complete answered invalid_result: %s", task.run_id,
                        task.stage, task.attempt, why or "the result does not match the contract's output schema")
        elif outcome is not None and outcome not in (Outcome.ACCEPTED, Outcome.DUPLICATE):
            log.warning("run %s stage %s attempt %s: %s answered %s", task.run_id, task.stage, task.attempt,
                        word, outcome.value)
        elif kind == "fail":  # what failed and why, on the line a user reads (the traceback is at DEBUG)
            log.warning("run %s stage %s attempt %s: failed in %.0f ms: %s%s", task.run_id, task.stage,
                        task.attempt, took, attempt.failure, f" ({outcome.value})" if outcome else "")
        else:
            log.info("run %s stage %s attempt %s: %s in %.0f ms%s", task.run_id, task.stage, task.attempt, word,
                     took, f" ({outcome.value})" if outcome else "")
        if attempt.on_settled is not None:
            try:
                attempt.on_settled(attempt)
            except Exception as exc:
                log.warning("run %s stage %s: %s", task.run_id, task.stage, exc)
        with self._lock:
            self.counts[word] = self.counts.get(word, 0) + 1
            self._reporting -= 1
            self._idle.notify_all()
        self.wake()

    def _lost(self, attempt: Attempt, answer: Outcome) -> None:
        """A heartbeat answered stale, late or unknown: tell the handler to stop."""
        log.warning("run %s stage %s attempt %s: heartbeat answered %s, the attempt is no longer ours",
                    attempt.task.run_id, attempt.task.stage, attempt.task.attempt, answer.value)
        attempt.stop()

    def _shutdown(self, loops: List[threading.Thread]) -> None:
        """Wait grace_s for running handlers, report the rest failed (worker.shutdown), stop."""
        self.stopping.set()
        self.wake()
        deadline = time.monotonic() + self.grace_s
        with self._lock:
            while self._running and not self.hard_stop.is_set() and time.monotonic() < deadline:
                self._idle.wait(0.1)
            left = list(self._running.values())
        # reporting is given 15 s more when PostgreSQL is unreachable; then the leases run out
        give_up = threading.Timer(15, self.hard_stop.set)
        give_up.daemon = True
        give_up.start()
        for attempt in left:
            if not attempt.claim_settlement():
                continue  # it ended just now
            attempt.stop()
            log.warning("run %s stage %s attempt %s: still running after the grace period, reported worker.shutdown",
                        attempt.task.run_id, attempt.task.stage, attempt.task.attempt)
            self._settle(attempt, "fail", {"code": "worker.shutdown",
                                           "message": f"worker {self.worker_id} stopped before the task ended"},
                         claimed=True)
        for t in loops:
            t.join(15)
        with self._lock:
            while self._reporting and not self.hard_stop.is_set():
                self._idle.wait(0.1)
        self.hard_stop.set()
        if self.reporter is not None:
            self.reporter.close(15)
        if self.pool is not None:
            self.pool.close()
        if self._own_aloop and self.aloop is not None:
            self.aloop.call_soon_threadsafe(self.aloop.stop)
            self.aloop, self._own_aloop = None, False
        log.info("wfe worker %s stopped: %s", self.worker_id,
                 ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())) or "no tasks")


def _is_async(fn: Callable[..., Any]) -> bool:
    """True for an ``async def`` handler (or a callable object whose __call__ is one)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))
