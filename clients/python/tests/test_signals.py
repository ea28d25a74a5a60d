"""The 0.3.0 SQL API from Python against the real server: signals, find_run, put_payload, schedules (sync and
wfe.aio)."""
from __future__ import annotations

import asyncio
import datetime
import os

import psycopg
import pytest

import wfe
from conftest import DSN, one


def waiting_flow(db: psycopg.Connection, tag: str) -> str:
    wfe.register_signal(db, f"py.{tag}.approval@1", {"type": "object", "required": ["approved"],
                                                     "properties": {"approved": {"type": "boolean"}}})
    wfe.create_definition(db, f"""
name: py-{tag}
version: "1.0.0"
entry: wait
stages:
  - name: wait
    type: wait
    signal: py.{tag}.approval@1
    on_success: completed
    on_failure: failed
""")
    wfe.approve(db, f"py-{tag}", "1.0.0")
    wfe.activate(db, f"py-{tag}", "1.0.0")
    return f"py-{tag}"


def test_signals_and_find_run(db: psycopg.Connection) -> None:
    tag = f"sig{os.getpid()}"
    workflow = waiting_flow(db, tag)
    run = wfe.submit(db, workflow, {}, idempotency_key=f"{tag}-order-7").run_id
    assert wfe.find_run(db, workflow, f"{tag}-order-7") == run
    assert wfe.find_run(db, workflow, f"{tag}-no-such-order") is None
    with pytest.raises(wfe.InvalidArgument):  # the payload's schema refuses it, nothing is kept
        wfe.signal(db, run, f"py.{tag}.approval@1", {"approved": "yes"})
    got = wfe.signal(db, run, f"py.{tag}.approval@1", {"approved": True}, idempotency_key="ann-1")
    assert got in (wfe.Outcome.ACCEPTED, wfe.Outcome.BUFFERED)
    assert wfe.signal(db, run, f"py.{tag}.approval@1", {"approved": True}, idempotency_key="ann-1") is \
        wfe.Outcome.DUPLICATE
    rep = wfe.wait_for_run(DSN, run, timeout=30)
    assert rep["state"] == "completed" and rep["stages"][0]["result"] == {"approved": True}, rep
    assert wfe.signal(db, run, f"py.{tag}.approval@1", {"approved": False}) is wfe.Outcome.LATE
    assert wfe.signal(db, -1, f"py.{tag}.approval@1", {"approved": True}) is wfe.Outcome.UNKNOWN

    async def from_asyncio() -> None:
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
            second = await wfe.aio.submit(conn, workflow, {}, idempotency_key=f"{tag}-order-8")
            assert await wfe.aio.find_run(conn, workflow, f"{tag}-order-8") == second.run_id
            assert await wfe.aio.signal(conn, second.run_id, f"py.{tag}.approval@1", {"approved": False}) in \
                (wfe.Outcome.ACCEPTED, wfe.Outcome.BUFFERED)
            assert (await second.result(timeout=30))["stages"][0]["result"] == {"approved": False}

    asyncio.run(from_asyncio())


def test_payloads_and_schedules(db: psycopg.Connection) -> None:
    tag = f"sch{os.getpid()}"
    key = wfe.put_payload(db, {"modelId": "m-big", "blob": "x" * 1000})
    assert isinstance(key, str) and key
    with pytest.raises(wfe.InvalidArgument):
        wfe.put_payload(db, [1, 2])  # a run's context is an object
    workflow = waiting_flow(db, tag)
    name = f"py-{tag}-nightly"
    wfe.create_schedule(db, name, workflow, "0 3 * * *", {"n": 1})
    with pytest.raises(wfe.WfeError):
        wfe.create_schedule(db, f"{name}-bad", workflow, "not a cron")
    run = wfe.trigger_schedule(db, name)
    assert one(db, "SELECT workflow FROM wfe.runs WHERE run_id = %s", (run,)) == workflow
    wfe.pause_schedule(db, name)
    wfe.resume_schedule(db, name)
    wfe.alter_schedule(db, name, cron="0 4 * * *")
    now = datetime.datetime.now(datetime.timezone.utc)
    assert wfe.backfill_schedule(db, name, now - datetime.timedelta(days=3), now) == 3  # one tick a day
    wfe.drop_schedule(db, name)
    with pytest.raises(wfe.UnknownObject):
        wfe.trigger_schedule(db, name)
