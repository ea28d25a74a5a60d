"""The client's pure parts: the registry, the queue plan, x-death counting, envelopes, errors."""
from __future__ import annotations

import json
import os

import pytest

import wfe
from wfe.broker import death_count, task_from_envelope


def test_handlers_match_the_exact_ref_first_then_the_name() -> None:
    app = wfe.Worker("", worker_id="w")
    app.register("thumbnail.render", lambda t: "any", queue="rendering")
    app.register("thumbnail.render@3", lambda t: "three")
    task = wfe.Task(run_id=1, stage="s", attempt=1, fence=1, queue="rendering", contract="thumbnail.render@3", input={})
    assert app.handler_for(task)(task) == "three"
    task.contract = "thumbnail.render@4"
    assert app.handler_for(task)(task) == "any"
    task.contract = "other@1"
    assert app.handler_for(task) is None
    with pytest.raises(ValueError):
        app.register("thumbnail.render@3", lambda t: None)


def test_the_queue_plan() -> None:
    app = wfe.Worker("")
    app.register("a@1", lambda t: None, queue="qa", mode="broker")
    app.register("b@1", lambda t: None, queue="qb")
    assert app._plan(None, None) == {"qa": "broker", "qb": "auto"}
    assert app._plan(None, "broker") == {"qa": "broker", "qb": "broker"}
    assert app._plan(["qb"], {"qb": "broker"}) == {"qb": "broker"}
    with pytest.raises(ValueError):
        app._plan(None, "push")
    with pytest.raises(ValueError):
        app.register("c@1", lambda t: None, queue="qc", mode="push")
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


def test_task_worker_is_a_deprecated_alias_of_contract() -> None:
    task = wfe.Task(run_id=1, stage="s", attempt=1, fence=1, queue="q", contract="a.b@2", input={})
    with pytest.warns(DeprecationWarning, match="Task.contract"):
        assert task.worker == "a.b@2"
    with pytest.warns(DeprecationWarning):
        task.worker = "c@1"
    assert task.contract == "c@1" and task.contract_name == "c"


def test_results_are_encoded_and_measured_before_reporting() -> None:
    from wfe import _result
    assert _result.encode({"a": [1, "é"]}, 100, 64) == '{"a":[1,"é"]}'
    assert _result.encode(None, 100, 64) == "{}"
    assert _result.depth(5, 64) == 0 and _result.depth([[{}]], 64) == 3
    for bad, why in (({1, 2}, "not JSON"), ({"x": float("nan")}, "not JSON"), (object(), "not JSON"),
                     ("x" * 101, r"103 bytes, more than wfe.max_payload_bytes \(100\)"),
                     ([[[1]]], r"nested more than wfe.max_json_depth \(2\)")):
        with pytest.raises(_result.ResultRefused, match=why):
            _result.encode(bad, 100, 2)
    deep: list = []
    for _ in range(100000):  # deeper than the interpreter's stack: measured without recursing
        deep = [deep]
    with pytest.raises(_result.ResultRefused, match="nested"):
        _result.encode(deep, 100, 64)


def test_the_version_is_the_extensions() -> None:
    import re
    from conftest import TOP
    control = open(os.path.join(TOP, "wfe.control")).read()
    assert wfe.__version__ == re.search(r"default_version = '([^']+)'", control).group(1)
