"""The RabbitMQ topology of docs/delivery.md ("RabbitMQ topology"), written once for the client.

The server and wfe-worker take the same names from src/amqp/topology.c; keep the two in step.
"""
from __future__ import annotations

from typing import Any, Dict

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


def declare(ch: Any, queues: Any, retry_ttl_ms: int) -> None:
    """Declare the exchanges, wfe.dlq and the queues of each wfe queue, as the wfe publisher does."""
    for ex in EXCHANGES:
        ch.exchange_declare(ex, exchange_type="topic", durable=True)
    ch.queue_declare(DLQ, durable=True)
    ch.queue_bind(DLQ, COMMANDS, routing_key=DEAD)
    for q in queues:
        for t in TRACKS:
            main_args: Dict[str, Any] = {"x-dead-letter-exchange": RETRY,
                                         "x-dead-letter-routing-key": retry_key(q, t)}
            ch.queue_declare(queue(q, t), durable=True, arguments=main_args)
            ch.queue_bind(queue(q, t), COMMANDS, routing_key=run_key(q, t))
            retry_args: Dict[str, Any] = {"x-message-ttl": retry_ttl_ms, "x-dead-letter-exchange": COMMANDS,
                                          "x-dead-letter-routing-key": run_key(q, t)}
            ch.queue_declare(retry_queue(q, t), durable=True, arguments=retry_args)
            ch.queue_bind(retry_queue(q, t), RETRY, routing_key=retry_key(q, t))
