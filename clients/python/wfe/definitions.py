"""Contracts, workflow definitions and queues from Python: the same SQL functions psql calls.

    wfe.register_worker(db, "payment.review@1", "payments-review", output_schema={...})
    digest = wfe.create_definition(db, open("payment-routing.yaml").read())
    wfe.approve(db, "payment-routing", "1.0.0")      # by a second person when four-eyes is on
    wfe.activate(db, "payment-routing", "1.0.0")
    wfe.configure_queue(db, "payments-review", "broker")

Each runs in the caller's transaction (autocommit connections commit at once) and raises the
WfeError subclass of the server's SQLSTATE: InvalidDefinition (with .diagnostics) for a source
that does not compile, PermissionDenied for a role without the right, and so on.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from psycopg.types.json import Jsonb

from .calls import Executor, _one


def register_worker(db: Executor, ref: str, queue: str, *, input_schema: Optional[Mapping[str, Any]] = None,
                    output_schema: Optional[Mapping[str, Any]] = None) -> None:
    """wfe.register_worker: the worker contract ref (``name@N``) served on queue, with its JSON Schemas."""
    _one(db, "SELECT wfe.register_worker(%s, %s, %s, %s)",
         (ref, queue, Jsonb(dict(input_schema or {})), Jsonb(dict(output_schema or {}))))


def create_definition(db: Executor, source: str) -> str:
    """wfe.create_definition: store a workflow's YAML source (as a draft); its digest (``sha256:...``)."""
    return str(_one(db, "SELECT wfe.create_definition(%s)", (source,)))


def approve(db: Executor, workflow: str, version: str) -> None:
    """wfe.approve: approve a stored version of workflow."""
    _one(db, "SELECT wfe.approve(%s, %s)", (workflow, version))


def activate(db: Executor, workflow: str, version: str) -> None:
    """wfe.activate: make an approved version the one new runs of workflow use."""
    _one(db, "SELECT wfe.activate(%s, %s)", (workflow, version))


def configure_queue(db: Executor, queue: str, delivery: str = "poll", *, max_in_flight: Optional[int] = None,
                    paused: bool = False) -> None:
    """wfe.configure_queue: a queue's delivery mode (poll or broker), in-flight limit and pause."""
    _one(db, "SELECT wfe.configure_queue(%s, %s, %s, %s)", (queue, delivery, max_in_flight, paused))
