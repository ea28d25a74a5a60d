"""The broker loop: consume wfe's RabbitMQ dispatches, exactly as docs/delivery.md says.

For each dispatch message:

1. its x-death count (the retry-queue cycles) above wfe.broker_max_redeliveries:
   publish it unchanged to wfe.commands with routing key ``dead`` (publisher
   confirms), then acknowledge it; it lands in wfe.dlq;
2. a body that is not an envelope, or PostgreSQL unreachable: reject without
   requeue (RabbitMQ's retry queue brings it back: a pre-acceptance retry);
3. wfe.accept_task: ``accepted`` runs the handler (the worker fetches a
   large-track input with wfe.fetch_payload first), reports, and only then
   acknowledges; any other answer acknowledges without running anything.

While PostgreSQL does not answer, the consumers are cancelled (messages wait in
their queue instead of cycling through the retry queue) and come back once it
answers.  A private queue bound to ``cancel.<queue>`` carries cancellation requests:
the attempt's Task.stopped is set and, once its handler returns, the
cancellation is acknowledged with wfe.ack_cancel instead of a report.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import psycopg

from . import _topology as topology
from . import calls
from ._attempts import Attempt
from ._links import Backoff, Link, first_line
from .errors import WfeError
from .outcome import Outcome
from .task import Task
from .worker import Worker

log = logging.getLogger("wfe")

def death_count(headers: Optional[Dict[str, Any]]) -> int:
    """The largest count among a message's x-death entries (0 without any)."""
    deaths = (headers or {}).get("x-death") or []
    counts = [int(d.get("count", 0)) for d in deaths if isinstance(d, dict)]
    return max(counts, default=0)


def task_from_envelope(body: bytes, queue: str) -> Task:
    """The Task of a dispatch envelope (ValueError if it is not one)."""
    env = json.loads(body)
    if not isinstance(env, dict):
        raise ValueError("the body is not a JSON object")
    try:
        run_id, stage, attempt, fence = int(env["run_id"]), str(env["stage"]), int(env["attempt"]), int(env["fence"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"the envelope lacks run_id, stage, attempt or fence: {exc}") from None
    return Task(run_id=run_id, stage=stage, attempt=attempt, fence=fence, queue=queue,
                contract=str(env.get("worker") or ""), input=env.get("payload_inline"),
                payload_ref=env.get("payload_ref"), tenant=str((env.get("headers") or {}).get("tenant", "default")),
                heartbeat_ms=env.get("heartbeat_ms"), execution_deadline_ms=env.get("execution_deadline_ms"),
                definition_digest=env.get("definition_digest"), message_id=env.get("message_id"),
                traceparent=env.get("traceparent"), mode="broker")


class BrokerLoop:
    """Consumes wfe.<queue>.small and .large for some broker queues of a Worker."""

    def __init__(self, worker: Worker, queues: List[str], once: bool) -> None:
        import pika  # only broker mode needs it
        self.pika = pika
        quiet = logging.getLogger("pika")
        if quiet.level == logging.NOTSET:
            # pika logs every connection step at INFO and a traceback on each failed reconnect;
            # the loop says what a user can act on (below).  Set pika's level to see its own.
            quiet.setLevel(logging.CRITICAL)
        self.w, self.queues, self.once = worker, queues, once
        self.db = Link(worker.conninfo, "accept", worker.hard_stop, pooled=worker.pooled)
        self.backoff = Backoff()
        self.conn: Any = None
        self.work: Any = None
        self.dead: Any = None
        self.tags: List[str] = []
        self.last_delivery = time.monotonic()
        self.max_redeliveries = worker.max_redeliveries
        self.retry_ttl_ms = 5000
        self.queue_type = "classic"
        self.kept_reported = False
        self.node_first = 0  # the node tried first: the one after a node whose connection dropped
        self.node = 0
        self.db_down = False  # consumption paused until PostgreSQL answers again
        self.db_retry_at = 0.0

    # --- connection ------------------------------------------------------------

    def _settings(self) -> None:
        """wfe.broker_max_redeliveries, wfe.broker_retry_ttl_ms and wfe.amqp_queue_type, as the server has them."""
        db = self.db.get()
        if self.max_redeliveries is None:
            self.max_redeliveries = int(calls.setting(db, "wfe.broker_max_redeliveries") or 5)
        self.retry_ttl_ms = int(calls.setting(db, "wfe.broker_retry_ttl_ms") or 5000)
        self.queue_type = calls.setting(db, "wfe.amqp_queue_type") or "classic"

    def _connect(self) -> None:
        """Connect to the first node of amqp_url that answers, starting after the node whose
        connection dropped (a cluster's nodes are listed comma-separated, as in wfe.amqp_uri)."""
        pika = self.pika
        urls = topology.nodes(self.w.amqp_url)
        order = [(self.node_first + k) % len(urls) for k in range(len(urls))]
        errors = []
        for i in order:
            params = pika.URLParameters(urls[i])
            params.heartbeat = 30
            params.blocked_connection_timeout = 60
            params.socket_timeout = 5
            params.connection_attempts = 1
            try:
                self.conn = pika.BlockingConnection(params)
                self.node = i
                break
            except (pika.exceptions.AMQPConnectionError, OSError) as exc:
                errors.append(f"{params.host}:{params.port}: {first_line(exc) if str(exc) else type(exc).__name__}")
        else:
            raise pika.exceptions.AMQPConnectionError("; ".join(errors))
        if len(urls) > 1:
            log.info("broker: connected to RabbitMQ node %d of %d (%s:%s)", self.node + 1, len(urls),
                     params.host, params.port)
        if self.w.declare:
            self._declare()
        self.dead = self.conn.channel()
        self.dead.confirm_delivery()  # a dead letter is acknowledged only once RabbitMQ has it
        self.work = self.conn.channel()
        self.work.basic_qos(prefetch_count=self.w.concurrency)
        self._consume()
        cancels = self.conn.channel()  # its own channel: the work prefetch never holds it back
        private = cancels.queue_declare("", exclusive=True, auto_delete=True).method.queue
        for q in self.queues:
            cancels.queue_bind(private, topology.COMMANDS, routing_key=topology.cancel_key(q))
        cancels.basic_consume(private, self._on_cancel, auto_ack=True)

    def _consume(self) -> None:
        """Start the consumers of both tracks of every queue."""
        self.tags = [self.work.basic_consume(topology.queue(q, t), self._on_message(q), auto_ack=False)
                     for q in self.queues for t in topology.TRACKS]
        self.db_down = False
        log.info("broker: consuming %s", ", ".join(topology.queue(q, t) for q in self.queues for t in topology.TRACKS))

    def _declare(self) -> None:
        """The topology, as the wfe publisher declares it (docs/delivery.md, RabbitMQ topology)."""
        topology.declare(self.conn.channel, self.queues, self.retry_ttl_ms, self.queue_type,
                         self.max_redeliveries if self.max_redeliveries is not None else 5, self._kept)

    def _kept(self, name: str, exc: BaseException) -> None:
        """RabbitMQ kept an existing queue that disagrees with our declaration: said once."""
        if self.kept_reported:
            return
        self.kept_reported = True
        if topology.is_type_mismatch(exc):
            log.warning("broker: RabbitMQ kept %s with its type (wfe.amqp_queue_type is '%s'): %s; a queue's "
                        "type cannot change: migrate the queues as docs/operations.md (\"Moving to quorum "
                        "queues\") says, or set wfe.amqp_queue_type back", name, self.queue_type, first_line(exc))
        else:
            log.warning("broker: RabbitMQ kept %s with its arguments: %s; queue arguments such as "
                        "wfe.broker_retry_ttl_ms apply only to new queues", name, first_line(exc))

    def _close(self) -> None:
        if self.conn is not None:
            # the next connection starts with the next node: this one may be gone
            self.node_first = (self.node + 1) % len(topology.nodes(self.w.amqp_url))
        if self.conn is not None and self.conn.is_open:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn = self.work = self.dead = None

    # --- the loop ------------------------------------------------------------------

    def run(self) -> None:
        """Until the worker stops and its handlers are settled (or, with once, nothing is left)."""
        pika = self.pika
        failures = 0  # reconnects in a row
        try:
            while True:
                if self.w.stopping.is_set() and (self.conn is None or self.w.busy() == 0):
                    return
                try:
                    if self.conn is None:
                        # consume only while PostgreSQL answers: else messages would cycle the retry queue
                        self._settings()
                        self._connect()
                        self.backoff.reset()
                    self.conn.process_data_events(time_limit=0.2)
                    if (self.w.stopping.is_set() or self.db_down) and self.tags:
                        self._stop_consuming()
                    if self.db_down and not self.w.stopping.is_set() and self._db_back():
                        self._consume()
                    if (self.once and self.w.busy() == 0 and time.monotonic() - self.last_delivery > 2.0):
                        return
                except (pika.exceptions.AMQPError, OSError, psycopg.OperationalError) as exc:
                    self._close()
                    if self.w.stopping.is_set():
                        return
                    failures += 1
                    delay = self.backoff.delay()
                    log.warning("broker: %s: %s; reconnecting (attempt %d, next in %.1f s)", type(exc).__name__,
                                first_line(exc) if str(exc) else "connection lost", failures, delay)
                    self.w.stopping.wait(delay)
                    continue
                failures = 0
        finally:
            self._close()
            self.db.drop()

    def _db_back(self) -> bool:
        """While consumption is paused for PostgreSQL: is it back? (tries at the backoff's pace)"""
        if time.monotonic() < self.db_retry_at:
            return False
        try:
            self.db.get().execute("SELECT 1")
            self.backoff.reset()
            log.info("broker: PostgreSQL answers again; consuming again")
            return True
        except psycopg.OperationalError:
            self.db.drop()
            self.db_retry_at = time.monotonic() + self.backoff.delay()
            return False

    def _stop_consuming(self) -> None:
        """Stopping, or PostgreSQL away: cancel the consumers; messages delivered but not
        started go back to their queue (no retry cycle is counted)."""
        for tag in self.tags:
            for method, _props, _body in self.work.basic_cancel(tag) or []:
                self.work.basic_reject(method.delivery_tag, requeue=True)
        self.tags = []

    def _threadsafe(self, fn: Callable[[], None]) -> None:
        """Run fn on the connection's thread (pika channels are not thread-safe)."""
        conn = self.conn
        if conn is None:
            return  # that connection is gone: RabbitMQ redelivers, accept_task answers duplicate
        try:
            conn.add_callback_threadsafe(fn)
        except Exception as exc:
            log.debug("broker: %s", exc)

    # --- messages --------------------------------------------------------------------

    def _on_message(self, queue: str) -> Callable[..., None]:
        def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
            self.last_delivery = time.monotonic()
            self._handle(ch, queue, method, props, body)
        return on_message

    def _handle(self, ch: Any, queue: str, method: Any, props: Any, body: bytes) -> None:
        tag = method.delivery_tag
        deaths = death_count(props.headers)
        if self.max_redeliveries is not None and deaths > self.max_redeliveries:
            self._dead_letter(ch, method, props, body, f"{deaths} pre-acceptance retries")
            return
        try:
            task = task_from_envelope(body, queue)
        except ValueError as exc:
            log.warning("broker: rejected a message from %s: %s", method.routing_key, exc)
            ch.basic_reject(tag, requeue=False)
            return
        try:
            # under the worker's lease, renewed by heartbeats: if this process dies, the task is
            # retried one lease later, not at the stage's execution deadline
            answer = calls.accept_task(self.db.get(), task, self.w.worker_id, self.w.lease_ms)
        except psycopg.OperationalError as exc:
            log.warning("broker: PostgreSQL is unreachable, message rejected for a retry; consuming stops until "
                        "it answers: %s", first_line(exc))
            self.db.broke(exc, wait=False)
            ch.basic_reject(tag, requeue=False)
            self.db_down = True
            return
        except (WfeError, psycopg.Error) as exc:
            log.warning("broker: accept_task refused run %s stage %s: %s", task.run_id, task.stage, exc)
            ch.basic_reject(tag, requeue=False)
            return
        if answer is not Outcome.ACCEPTED:
            log.info("broker: run %s stage %s attempt %s: accept_task answered %s; acknowledged, not run",
                     task.run_id, task.stage, task.attempt, answer.value)
            ch.basic_ack(tag)
            return
        self.w.start(task, lambda a: self._threadsafe(lambda: ch.is_open and ch.basic_ack(tag)))

    def _dead_letter(self, ch: Any, method: Any, props: Any, body: bytes, reason: str) -> None:
        """Publish to wfe.commands 'dead' (confirmed), then acknowledge the original."""
        headers = dict(props.headers or {})
        headers["x-wfe-dead-reason"] = reason
        headers["x-wfe-dead-by"] = self.w.worker_id
        out = self.pika.BasicProperties(headers=headers, message_id=props.message_id,
                                        correlation_id=props.correlation_id, content_type=props.content_type,
                                        delivery_mode=2, timestamp=props.timestamp)
        self.dead.basic_publish(topology.COMMANDS, topology.DEAD, body, properties=out)
        ch.basic_ack(method.delivery_tag)
        log.warning("broker: dead-lettered a message from %s (%s)", method.routing_key, reason)

    def _on_cancel(self, ch: Any, method: Any, props: Any, body: bytes) -> None:
        """A cancellation request: stop the attempt if it runs here; ack_cancel once it stopped."""
        try:
            req = json.loads(body)
            ids: Tuple[int, str, int, int] = (int(req["run_id"]), str(req["stage"]), int(req["attempt"]),
                                              int(req["fence"]))
        except (ValueError, KeyError, TypeError):
            return
        attempt: Optional[Attempt] = self.w.find(ids)
        if attempt is None:
            return  # every worker of the queue sees every request
        log.info("broker: run %s stage %s attempt %s: cancellation requested (%s)", ids[0], ids[1], ids[2],
                 req.get("reason"))
        attempt.cancel_requested = True
        attempt.task.stopped.set()
