"""The RabbitMQ topology of docs/delivery.md ("RabbitMQ topology"), written once for the client.

The server and wfe-worker take the same names from src/amqp/topology.c; keep the two in step.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List

COMMANDS = "wfe.commands"  # dispatches, cancellations, dead letters
RETRY = "wfe.retry"        # rejected dispatches, on their way back
EVENTS = "wfe.events"      # the event log's projection
EXCHANGES = (COMMANDS, RETRY, EVENTS)

DLQ = "wfe.dlq"            # the dead dispatches, bound to wfe.commands with key DEAD
DEAD = "dead"

TRACKS = ("small", "large")


def queue(q: str, track: str) -> str:
    """The AMQP queue of one track of a wfe queue."""
    return f"wfe.{q}.{track}"


def retry_queue(q: str, track: str) -> str:
    """The retry queue of one track of a wfe queue."""
    return f"wfe.{q}.retry.{track}"


def run_key(q: str, track: str) -> str:
    """The routing key of a dispatch to one track of a wfe queue."""
    return f"run.{q}.{track}"


def retry_key(q: str, track: str) -> str:
    """The routing key of a rejected dispatch on its way to the retry queue."""
    return f"retry.{q}.{track}"


def cancel_key(q: str) -> str:
    """The routing key of the cancellation requests of a wfe queue."""
    return f"cancel.{q}"


QUEUE_TYPES = ("classic", "quorum")  # wfe.amqp_queue_type


def nodes(urls: str) -> List[str]:
    """The amqp:// URLs of a comma-separated list of a cluster's nodes (wfe.amqp_uri's form)."""
    return [u.strip() for u in urls.split(",") if u.strip()]


def queue_arguments(queue_type: str, dead_letters: bool) -> Dict[str, Any]:
    """What every wfe queue of this type carries: nothing for classic queues (0.2.0 declared them
    so, and a redeclaration must stay equivalent); for quorum queues the type and at-least-once
    dead-lettering, which RabbitMQ allows only with overflow reject-publish."""
    if queue_type != "quorum":
        return {}
    args: Dict[str, Any] = {"x-queue-type": "quorum"}
    if dead_letters:
        args.update({"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"})
    return args


def is_type_mismatch(exc: BaseException) -> bool:
    """Did RabbitMQ refuse a declaration because the queue exists with another type?  It names the
    first argument that differs: x-queue-type, or another one only wfe's quorum queues carry."""
    text = str(exc)
    return "406" in text and any(f"'{a}'" in text for a in ("x-queue-type", "x-overflow", "x-dead-letter-strategy"))


def declare(channel: Callable[[], Any], queues: Any, retry_ttl_ms: int, queue_type: str = "classic",
            delivery_limit: int = 5, kept: Callable[[str, BaseException], None] = lambda q, e: None) -> None:
    """Declare the exchanges, wfe.dlq and the queues of each wfe queue, as the wfe publisher does
    (src/amqp/topology.c).  channel() opens a channel; RabbitMQ closes it when a queue exists with
    another type or other arguments: that queue is kept as it is (kept(name, error) is told) and
    the declarations go on on a new channel."""
    ch = channel()

    def queue_declare(name: str, args: Dict[str, Any], exchange: str, key: str) -> None:
        nonlocal ch
        try:
            ch.queue_declare(name, durable=True, arguments=args)
        except Exception as exc:  # pika.exceptions.ChannelClosedByBroker; pika is optional here
            if "406" not in str(exc):
                raise
            kept(name, exc)
            ch = channel()
        ch.queue_bind(name, exchange, routing_key=key)

    for ex in EXCHANGES:
        ch.exchange_declare(ex, exchange_type="topic", durable=True)
    queue_declare(DLQ, queue_arguments(queue_type, False), COMMANDS, DEAD)
    for q in queues:
        for t in TRACKS:
            main_args: Dict[str, Any] = {"x-dead-letter-exchange": RETRY,
                                         "x-dead-letter-routing-key": retry_key(q, t),
                                         **queue_arguments(queue_type, True)}
            if queue_type == "quorum":
                main_args["x-delivery-limit"] = delivery_limit  # requeued past it: the retry path
            queue_declare(queue(q, t), main_args, COMMANDS, run_key(q, t))
            retry_args: Dict[str, Any] = {"x-message-ttl": retry_ttl_ms, "x-dead-letter-exchange": COMMANDS,
                                          "x-dead-letter-routing-key": run_key(q, t),
                                          **queue_arguments(queue_type, True)}
            queue_declare(retry_queue(q, t), retry_args, RETRY, retry_key(q, t))
    if ch.is_open:
        ch.close()
