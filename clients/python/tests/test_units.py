"""The client's pure parts: the registry, the queue plan, x-death counting, envelopes, errors."""
from __future__ import annotations

import dataclasses
import json
import os
from typing import List, Optional

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


@dataclasses.dataclass
class Item:
    sku: str
    qty: int = 1


@dataclasses.dataclass
class Order:
    items: List[Item]
    total: float
    note: Optional[str] = None
    first: Optional[Item] = None


def test_typed_dataclasses_load_and_dump() -> None:
    from wfe import _typed

    got = _typed.load(Order, {"items": [], "total": 3, "first": {"sku": "a"}, "unknown": 1})
    assert got == Order(items=[], total=3, first=Item("a", 1))
    for bad, where in (({"items": [], "total": "3"}, "Order.total: expected float, not a string"),
                       ({"total": 1}, "Order.items: required, missing"),
                       ({"items": [], "total": 1, "first": {"sku": 5}}, "Order.first.sku"),
                       ({"items": [], "total": True}, "not a boolean"), ([], "expected an object")):
        with pytest.raises(_typed.TypeMismatch, match=where):
            _typed.load(Order, bad)
    assert _typed.dump(Order, Order(items=[], total=2.5)) == {"items": [], "total": 2.5, "note": None, "first": None}
    assert _typed.dump(Item, {"sku": "b"}) == {"sku": "b", "qty": 1}
    with pytest.raises(_typed.TypeMismatch, match="the result is a int, not a Item"):
        _typed.dump(Item, 5)
    with pytest.raises(_typed.TypeMismatch, match="Item.qty: expected int"):
        _typed.dump(Item, Item("c", "many"))  # type: ignore[arg-type]
    assert _typed.dump(None, Item("d")) == {"sku": "d", "qty": 1}  # untyped: a dataclass is still made a dict

    def handler(task: wfe.Task) -> Item: ...
    app = wfe.Worker("")
    app.register("typed@1", handler, queue="q", input=Order)
    assert app._types["typed@1"] == (Order, Item)  # the output type from the return annotation
    with pytest.raises(TypeError, match="dataclass or a pydantic model"):
        app.register("typed@2", handler, input=dict)


def test_the_pool_never_runs_more_threads_than_its_size() -> None:
    import threading
    import time
    from wfe._pool import Pool

    pool = Pool(3, "t")
    lock, now, most, seen = threading.Lock(), [0], [0], set()
    done = threading.Semaphore(0)

    def job() -> None:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
            seen.add(threading.current_thread().name)
        time.sleep(0.02)
        with lock:
            now[0] -= 1
        done.release()

    for _ in range(20):
        pool.submit(job)
    for _ in range(20):
        assert done.acquire(timeout=10)
    assert most[0] == 3 and pool.threads == 3 and seen == {"t-1", "t-2", "t-3"}
    pool.close()


def test_queue_concurrency_is_checked() -> None:
    with pytest.raises(ValueError, match="positive integer"):
        wfe.Worker("", queue_concurrency={"q": 0})
    app = wfe.Worker("", concurrency=4, queue_concurrency={"a": 1})
    with pytest.raises(ValueError, match="give queue="):
        app.register("x@1", lambda t: None, concurrency=2)
    app.register("y@1", lambda t: None, queue="b", concurrency=2)
    assert app.free_slots() == 4 and app.free_slots("a") == 1 and app.free_slots("b") == 2


def test_traceparents_are_read_as_w3c_says() -> None:
    from wfe import _trace
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert _trace.parse(tp) == ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "01")
    assert _trace.parse("00-" + "0" * 32 + "-00f067aa0ba902b7-01") is None
    assert _trace.parse("ff" + tp[2:]) is None and _trace.parse(None) is None
    task = wfe.Task(run_id=1, stage="s", attempt=1, fence=1, queue="q", contract="c@1", input={}, traceparent=tp)
    with _trace.span(task) as span:  # without opentelemetry: nothing, at no cost
        assert (span is None) == (not _trace.available())


def test_the_comparison_table_counts_the_programs() -> None:
    import re
    from conftest import readme_example
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    readme = open(os.path.join(here, "README.md")).read()

    def lines(path: str) -> int:
        return sum(1 for line in open(path) if line.strip())

    table = {m.group(1): (int(m.group(2)), int(m.group(3)))
             for m in re.finditer(r"^\| (wfe|Hatchet|DBOS|Temporal)\b[^|]*\| (\d+) \| (\d+) \|", readme, re.M)}
    assert table["wfe"] == (lines(readme_example("model_ingest_worker.py")),
                            lines(readme_example("model_ingest_submitter.py")))
    for sdk in ("Hatchet", "DBOS", "Temporal"):
        stem = os.path.join(here, "compare", sdk.lower())
        assert table[sdk] == (lines(stem + "_worker.py"), lines(stem + "_submitter.py")), sdk
