"""Typed inputs and results (dataclasses; pydantic when importable) against the real server: the input
typed, a result that does not fit its type refused before it is reported."""
from __future__ import annotations

import importlib.util
import os
from typing import Any, Dict

import psycopg
import pytest

import wfe
from conftest import HERE, Flow, Workers, one, stage, wait_until

TYPED = os.path.join(HERE, "workers", "typed.py")
HAS_PYDANTIC = importlib.util.find_spec("pydantic") is not None


def settled(db: psycopg.Connection, run_id: int) -> Dict[str, Any]:
    assert wait_until(lambda: one(db, "SELECT state FROM wfe.runs WHERE run_id = %s", (run_id,)) != "running", 30)
    return stage(db, run_id)


def check(db: psycopg.Connection, flow: Flow, wrong_field: str) -> None:
    submit = lambda spec: wfe.submit(db, flow.workflow, {"spec": spec}).run_id  # noqa: E731
    good = submit({"amount": 50, "account": "acc-1", "extra": "ignored"})
    wrong_type = submit({"amount": 50, "account": "acc-1", "note": "wrong_type"})
    missing = submit({"amount": 50, "account": "acc-1", "note": "missing"})
    bad_input = submit({"amount": "fifty", "account": "acc-1"})
    assert settled(db, good)["result"] == {"approved": True, "limit": 50}
    for run in (wrong_type, missing):
        s = settled(db, run)
        # refused before it was reported: result.refused, retryable, so the stage retried and failed
        assert s["state"] == "failed" and s["error"]["code"] == "result.refused", s
        assert "does not fit its type" in s["error"]["message"] and s["attempt"] == 3, s
    assert wrong_field in settled(db, wrong_type)["error"]["message"]
    assert "limit" in settled(db, missing)["error"]["message"]
    s = settled(db, bad_input)
    # an input that is not the handler's type fails at once: the same input would fail again
    assert s["error"]["code"] == "input.invalid" and s["attempt"] == 1 and "amount" in s["error"]["message"], s


def test_typed_dataclass_handlers(db: psycopg.Connection, workers: Workers) -> None:
    flow = Flow(db, retry="{ max_attempts: 3, initial_ms: 50, multiplier: 1.0, max_ms: 50, jitter: none }")
    workers.start(flow.env(), script=TYPED)
    check(db, flow, "approved")


@pytest.mark.skipif(not HAS_PYDANTIC, reason="pydantic is not importable (Debian: python3-pydantic)")
def test_typed_pydantic_handlers(db: psycopg.Connection, workers: Workers) -> None:
    retry = "{ max_attempts: 3, initial_ms: 50, multiplier: 1.0, max_ms: 50, jitter: none }"
    unused, flow = Flow(db, retry=retry), Flow(db, retry=retry)
    workers.start({"QUEUES": f"{unused.queue},{flow.queue}", "CONTRACTS": f"{unused.contract},{flow.contract}"},
                  script=TYPED)
    check(db, flow, "limit")
