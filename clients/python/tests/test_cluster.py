"""RabbitMQ clusters in the client (operations.md "RabbitMQ clusters and quorum queues"): the topology
declared as quorum queues, a queue kept with another type reported once and used, and a node list whose
first node is down."""
from __future__ import annotations

import os
import subprocess
from typing import Any, List, Tuple

import pika
import psycopg

import wfe
from wfe import _topology as topology
from conftest import AMQP, Flow, Workers, needs_broker, one, wait_until

pytestmark = needs_broker


def queue_types(names: List[str]) -> dict:
    """name -> (type, arguments) as rabbitmqctl lists them."""
    out = subprocess.run([os.environ["WFE_TEST_RMQCTL"], "list_queues", "-q", "--no-table-headers",
                          "name", "type", "arguments"], check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        f = line.split(None, 2)
        if f and f[0] in names:
            rows[f[0]] = (f[1], f[2] if len(f) > 2 else "")
    return rows


def test_quorum_topology_and_a_queue_kept_with_its_type() -> None:
    conn = pika.BlockingConnection(pika.URLParameters(AMQP))
    q = f"pyquorum{os.getpid()}"
    names = [topology.queue(q, "small"), topology.retry_queue(q, "small"), topology.DLQ]
    kept: List[Tuple[str, BaseException]] = []
    try:
        # wfe.dlq exists already, classic: the server's publisher declared it (wfe.amqp_queue_type = classic)
        topology.declare(conn.channel, [q], 700, "quorum", 3, lambda n, e: kept.append((n, e)))
        rows = queue_types(names)
        assert rows[names[0]][0] == "quorum" and "x-delivery-limit" in rows[names[0]][1], rows
        assert "at-least-once" in rows[names[0]][1], rows
        assert rows[names[1]][0] == "quorum" and "x-message-ttl" in rows[names[1]][1], rows
        assert rows[topology.DLQ][0] == "classic", "RabbitMQ kept wfe.dlq as it was"
        assert [n for n, _ in kept] == [topology.DLQ] and topology.is_type_mismatch(kept[0][1]), kept
        # the other way round: the classic declaration meets the quorum queues, reported, nothing raised
        kept.clear()
        topology.declare(conn.channel, [q], 700, "classic", 3, lambda n, e: kept.append((n, e)))
        assert sorted(n for n, _ in kept) == sorted([topology.queue(q, t) for t in topology.TRACKS] +
                                                    [topology.retry_queue(q, t) for t in topology.TRACKS]), kept
        assert all(topology.is_type_mismatch(e) for _, e in kept), kept
    finally:
        ch = conn.channel()
        for t in topology.TRACKS:
            ch.queue_delete(topology.queue(q, t))
            ch.queue_delete(topology.retry_queue(q, t))
        conn.close()


def test_a_node_list_whose_first_node_is_down(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db, mode="broker")
    dead = "amqp://guest:guest@127.0.0.1:1/"  # nothing listens on port 1
    workers.start(flow.env(MODE="broker", WFE_AMQP_URL=f"{dead},{AMQP}"))
    runs = [wfe.submit(db, flow.workflow, {"spec": {"i": i}}).run_id for i in range(3)]
    assert wait_until(lambda: one(db, "SELECT count(*) FROM wfe.runs WHERE run_id = ANY(%s) AND state = 'completed'",
                                  (runs,)) == 3, 30), workers.log()
    assert "reconnecting" not in workers.log(), "the dead node was skipped, not retried"
