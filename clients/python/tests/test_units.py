"""The client's pure parts: the registry, the queue plan, x-death counting, envelopes, errors."""
from __future__ import annotations

import json

import pytest

import wfe
from wfe.broker import death_count, task_from_envelope


def test_handlers_match_the_exact_ref_first_then_the_name() -> None:
    app = wfe.Worker("", worker_id="w")
    app.register("thumbnail.render", lambda t: "any", queue="rendering")
    app.register("thumbnail.render@3", lambda t: "three")
    task = wfe.Task(run_id=1, stage="s", attempt=1, fence=1, queue="rendering", worker="thumbnail.render@3", input={})
    assert app.handler_for(task)(task) == "three"
    task.worker = "thumbnail.render@4"
    assert app.handler_for(task)(task) == "any"
    task.worker = "other@1"
    assert app.handler_for(task) is None
    with pytest.raises(ValueError):
        app.register("thumbnail.render@3", lambda t: None)


def test_the_queue_plan() -> None:
    app = wfe.Worker("")
    app.register("a@1", lambda t: None, queue="qa", mode="broker")
    app.register("b@1", lambda t: None, queue="qb")
    assert app._plan(None, None) == {"qa": "broker", "qb": "poll"}
    assert app._plan(None, "broker") == {"qa": "broker", "qb": "broker"}
    assert app._plan(["qb"], {"qb": "broker"}) == {"qb": "broker"}
    with pytest.raises(ValueError):
        app._plan(None, "push")
    with pytest.raises(ValueError):
        wfe.Worker("", concurrency=0)
    with pytest.raises(ValueError):
        wfe.Worker("", lease_ms=0)


def test_x_death_counts_and_envelopes() -> None:
    assert death_count(None) == 0 and death_count({}) == 0
    assert death_count({"x-death": [{"count": 1, "queue": "wfe.q.retry.small"}, {"count": 3}]}) == 3
    body = json.dumps({"run_id": 4, "stage": "s", "attempt": 2, "fence": 77, "worker": "w@1",
                       "payload_inline": {"a": 1}, "payload_ref": None, "heartbeat_ms": 900,
                       "headers": {"tenant": "t1"}}).encode()
    task = task_from_envelope(body, "q")
    assert (task.ids, task.input, task.tenant, task.heartbeat_ms, task.mode) == ((4, "s", 2, 77), {"a": 1}, "t1",
                                                                                 900, "broker")
    assert task.idempotency_key == "4:s:2" and task.contract_name == "w"
    for bad in (b"not json", b"[1]", json.dumps({"run_id": 1}).encode()):
        with pytest.raises(ValueError):
            task_from_envelope(bad, "q")


def test_outcomes_and_fail() -> None:
    assert wfe.Outcome("duplicate") is wfe.Outcome.DUPLICATE and wfe.Outcome.DUPLICATE == "duplicate"
    assert wfe.Outcome.DUPLICATE.taken and not wfe.Outcome.STALE.taken
    with pytest.raises(ValueError):
        wfe.Outcome("maybe")
    f = wfe.Fail("bad.input", "no id", retryable=False, details={"field": "id"})
    assert f.error() == {"field": "id", "code": "bad.input", "message": "no id"} and not f.retryable
    assert wfe.LimitExceeded("result exceeds wfe.max_payload_bytes (64 MB)").limit == "wfe.max_payload_bytes"
