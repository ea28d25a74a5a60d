"""Workers: handlers registered per worker contract, run by a poll loop or a broker loop.

    app = wfe.Worker("dbname=shop")

    @app.handler("thumbnail.render@3", queue="rendering")
    def render(task: wfe.Task) -> dict:
        return {"url": make_thumbnail(task.input["modelId"])}

    app.run()                     # poll mode; mode="broker" consumes RabbitMQ

A handler takes a Task and returns the JSON result; raising fails the
attempt (wfe's retry policy decides what next; raise wfe.Fail(...,
retryable=False) when trying again cannot help).  The same handler serves
both delivery modes.
"""
from __future__ import annotations

import concurrent.futures
import importlib.util
import logging
import os
import signal
import socket
import threading
import time
import traceback
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import psycopg

from . import _result
from ._attempts import Attempt, Heartbeater, Reporter
from ._links import Link
from .errors import WfeError
from .outcome import Outcome
from .task import JSON, Fail, Task

log = logging.getLogger("wfe")

Handler = Callable[[Task], JSON]
MODES = ("poll", "broker")
CHOICES = MODES + ("auto",)  # auto: the queue's delivery mode as wfe.configure_queue set it


class Worker:
    """A worker process's handlers and the loops that feed them.

    conninfo: libpq connection string of a role with wfe_worker (and the queues' grants).
    worker_id: recorded as the attempts' claimed_by (default host:pid).
    concurrency: handlers running at once (threads); the claim size, or the broker prefetch.
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
                 max_redeliveries: Optional[int] = None, pooled: bool = False) -> None:
        if concurrency < 1 or concurrency > 1000:
            raise ValueError(f"concurrency must be between 1 and 1000, not {concurrency}")
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

    def handler(self, contract: str, *, queue: Optional[str] = None,
                mode: Optional[str] = None) -> Callable[[Handler], Handler]:
        """Decorator: fn handles the tasks of contract (``name@N``, or ``name`` for every version);
        queue (and its delivery mode) adds the queue to what run() serves."""
        def register(fn: Handler) -> Handler:
            self.register(contract, fn, queue=queue, mode=mode)
            return fn
        return register

    def register(self, contract: str, fn: Handler, *, queue: Optional[str] = None,
                 mode: Optional[str] = None) -> None:
        """Register fn for contract (see handler)."""
        if contract in self._handlers:
            raise ValueError(f"a handler for {contract} is registered already")
        if mode is not None and mode not in CHOICES:
            raise ValueError(f"mode must be auto, poll or broker, not {mode!r}")
        self._handlers[contract] = fn
        if queue is not None:
            if self._queues.get(queue) not in (None, mode) and mode is not None:
                raise ValueError(f"queue {queue} is given both modes")
            self._queues[queue] = mode or self._queues.get(queue)

    def handler_for(self, task: Task) -> Optional[Handler]:
        """The handler of the task's contract: its exact ref first, then its name."""
        return self._handlers.get(task.contract) or self._handlers.get(task.contract_name)

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

    def free_slots(self) -> int:
        """How many more handlers may start now."""
        with self._lock:
            return self.concurrency - len(self._running)

    def running(self) -> int:
        """Handlers running now."""
        with self._lock:
            return len(self._running)

    def busy(self) -> int:
        """Handlers running plus outcomes not yet answered: zero when nothing is left in hand."""
        with self._lock:
            return len(self._running) + self._reporting

    def start(self, task: Task, on_settled: Optional[Callable[[Attempt], None]] = None) -> Attempt:
        """Run task's handler in a thread of its own, heartbeating it, and report its outcome."""
        attempt = Attempt(task, on_settled)
        with self._lock:
            self._running[task.ids] = attempt
        assert self.heartbeats is not None
        self.heartbeats.add(attempt, self._beat_interval(task))
        threading.Thread(target=self._supervised, args=(attempt,), name=f"wfe-task-{task.run_id}-{task.stage}",
                         daemon=True).start()
        return attempt

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
        """Run the handler, make its result JSON text here (a bad one fails the attempt with
        result.refused), then report (unless the attempt was lost meanwhile)."""
        task = attempt.task
        fn = self.handler_for(task)
        kind, payload, retryable = "complete", None, True
        try:
            if fn is None:
                raise Fail("worker.no_handler", f"this worker has no handler for {task.contract}")
            if task.input is None and task.payload_ref is not None:
                try:
                    task.input = self._fetch(task)
                except (WfeError, psycopg.Error) as exc:
                    raise Fail("payload.unavailable", f"the input could not be fetched: {exc}") from exc
            payload = fn(task)
            payload = _result.encode(payload, self.max_result_bytes, self.max_result_depth)
        except _result.ResultRefused as exc:
            kind, payload, retryable = "fail", {"code": "result.refused", "message": str(exc)}, True
        except Fail as exc:
            kind, payload, retryable = "fail", exc.error(), exc.retryable
        except BaseException as exc:  # SystemExit from a handler fails its attempt, not the worker
            kind, retryable = "fail", True
            trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            payload = {"code": type(exc).__name__, "message": str(exc)[:2000], "traceback": trace[-4000:]}
            log.debug("run %s stage %s attempt %s: the handler raised:\n%s", task.run_id, task.stage,
                      task.attempt, trace)
        if kind == "fail":
            attempt.failure = f"{payload.get('code')}: {payload.get('message')}"
            payload = self._error_text(payload)
        if attempt.cancel_requested:
            self._settle(attempt, "ack_cancel")
        elif task.stopped.is_set():
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
            self._running.pop(attempt.task.ids, None)
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
        attempt.task.stopped.set()

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
            attempt.task.stopped.set()
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
        log.info("wfe worker %s stopped: %s", self.worker_id,
                 ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())) or "no tasks")
