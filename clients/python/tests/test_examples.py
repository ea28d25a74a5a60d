"""The example workflows (examples/*.yaml) run to completion through the client, in both delivery modes,
with the README's model-ingest worker; every program the README shows is taken from it and run here."""
from __future__ import annotations

import os
import re
from typing import Dict, Iterator

import psycopg
import pytest

import wfe
from conftest import DSN, HERE, TOP, Workers, needs_broker, one, readme_example, wait_until

EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")
MODEL_INGEST = ("actions", "rendering", "analysis", "metadata")
OTHERS = ("payments", "payments-review", "init")


@pytest.fixture(scope="module")
def definitions() -> Iterator[None]:
    with psycopg.connect(DSN, autocommit=True) as db:
        for name in ("model-ingest", "payment-routing", "system-initialization"):
            source = open(os.path.join(TOP, "examples", f"{name}.yaml")).read()
            version = re.search(r'^version:\s*"([^"]+)"', source, re.M).group(1)
            if one(db, "SELECT count(*) FROM wfe.definitions WHERE workflow = %s", (name,)) == 0:
                db.execute("SELECT wfe.create_definition(%s)", (source,))
                db.execute("SELECT wfe.approve(%s, %s)", (name, version))
                db.execute("SELECT wfe.activate(%s, %s)", (name, version))
    yield
    with psycopg.connect(DSN, autocommit=True) as db:
        for q in MODEL_INGEST + OTHERS:
            db.execute("SELECT wfe.configure_queue(%s, 'poll')", (q,))


def submit_all(db: psycopg.Connection, tag: str) -> Dict[int, str]:
    """Runs that take every route of the examples; run id -> what it is."""
    runs = {}
    for i in range(6):
        runs[wfe.submit(db, "model-ingest", {"modelId": f"{tag}-m-{i}"}).run_id] = f"model-ingest m-{i}"
    for amount in (250, 25000):
        runs[wfe.submit(db, "payment-routing", {"amount": amount, "account": "acc-1"}).run_id] = f"payment {amount}"
    runs[wfe.submit(db, "system-initialization", execution_context="foreground_app").run_id] = "system-initialization"
    return runs


def run_examples(db: psycopg.Connection, workers: Workers, mode: str) -> None:
    for q in MODEL_INGEST + OTHERS:
        db.execute("SELECT wfe.configure_queue(%s, %s)", (q, mode))
    env = {"WFE_MODE": mode, "WFE_DSN": DSN}
    workers.start(env, script=readme_example("model_ingest_worker.py"))
    workers.start(env, script=os.path.join(EXAMPLES, "payments_and_init_worker.py"))
    runs = submit_all(db, mode)
    reports = {r: wfe.wait_for_run(DSN, r, timeout=60) for r in runs}
    assert {runs[r]: rep["state"] for r, rep in reports.items()} == {what: "completed" for what in runs.values()}, \
        workers.log()
    stages = {runs[r]: {s["stage"]: s["status"] for s in rep["stages"]} for r, rep in reports.items()}
    assert stages["model-ingest m-1"]["render-thumbnail"] == "completed"  # a cache miss renders
    assert stages["model-ingest m-2"]["render-thumbnail"] == "skipped"  # a hit goes straight to publish
    assert stages["model-ingest m-1"]["finaliser.1"] == "completed"
    review = [s for s in reports[[r for r in runs if runs[r] == "payment 25000"][0]]["stages"]
              if s["stage"] == "high-value"][0]
    assert review["attempts"] == 2, "the first review failed and wfe retried it"
    assert stages["system-initialization"] == {"verify_storage": "completed", "fetch_configuration": "failed",
                                               "restore_session": "completed", "hydrate_user_profile": "completed"}
    claimed = {row[0] for row in db.execute(
        "SELECT claimed_by FROM wfe.run_stages WHERE run_id = ANY(%s) AND claimed_by IS NOT NULL",
        (list(runs),)).fetchall()}
    assert claimed and all(":" in c for c in claimed), claimed  # host:pid of the client's workers


def test_the_readme_seed_000_worker_is_20_lines() -> None:
    assert len(open(readme_example("model_ingest_worker.py")).read().splitlines()) <= 20


def test_examples_complete_in_poll_mode(definitions: None, db: psycopg.Connection, workers: Workers) -> None:
    run_examples(db, workers, "poll")


@needs_broker
def test_examples_complete_in_broker_mode(definitions: None, db: psycopg.Connection, workers: Workers) -> None:
    run_examples(db, workers, "broker")


def test_the_raw_psycopg_example_of_delivery_md_works(definitions: None, db: psycopg.Connection,
                                                      workers: Workers) -> None:
    code = open(os.path.join(EXAMPLES, "raw_poll_worker.py")).read()
    assert code.strip() in open(os.path.join(TOP, "docs", "delivery.md")).read()
    db.execute("SELECT wfe.configure_queue('payments-review', 'poll')")
    workers.start({"WFE_DSN": DSN, "WFE_QUEUE": "payments-review"}, script=os.path.join(EXAMPLES, "raw_poll_worker.py"))
    run = wfe.submit(db, "payment-routing", {"amount": 50000, "account": "acc-raw"}).run_id
    rep = wfe.wait_for_run(DSN, run, timeout=30)
    assert rep["state"] == "completed", workers.log()
    assert [s["result"] for s in rep["stages"] if s["stage"] == "high-value"] == [{"approved": True}]
    assert f"high-value run {run} attempt 1: accepted" in wait_until(
        lambda: f"run {run} attempt 1" in workers.log() and workers.log(), 5)


@pytest.mark.parametrize("example", ["review_worker.py", "async_review_worker.py"])
def test_the_readme_review_workers(definitions: None, db: psycopg.Connection, workers: Workers, example: str) -> None:
    script = readme_example(example)
    assert len(open(script).read().splitlines()) <= 22
    db.execute("SELECT wfe.configure_queue('payments-review', 'poll')")
    workers.start({"WFE_DSN": DSN}, script=script)
    big = wfe.submit(db, "payment-routing", {"amount": 150000, "account": "acc-big"}).run_id
    small = wfe.submit(db, "payment-routing", {"amount": 20000, "account": "acc-small"}).run_id
    rep = wfe.wait_for_run(DSN, big, timeout=30)
    assert [s["result"] for s in rep["stages"] if s["stage"] == "high-value"] == [{"approved": False}], workers.log()
    rep = wfe.wait_for_run(DSN, small, timeout=30)
    assert [s["result"] for s in rep["stages"] if s["stage"] == "high-value"] == [{"approved": True}], workers.log()
    if example == "review_worker.py":  # the one that configures logging: a line per task
        assert f"run {big} stage high-value attempt 1: complete" in wait_until(
            lambda: f"run {big} stage" in workers.log() and workers.log(), 5)


def test_the_readme_submitter(definitions: None, db: psycopg.Connection, workers: Workers) -> None:
    import subprocess
    import sys
    submitter = readme_example("model_ingest_submitter.py")
    assert len(open(submitter).read().splitlines()) <= 12
    for q in MODEL_INGEST:
        db.execute("SELECT wfe.configure_queue(%s, 'poll')", (q,))
    workers.start({"WFE_DSN": DSN}, script=readme_example("model_ingest_worker.py"))
    env = dict(os.environ, WFE_DSN=DSN)
    out = subprocess.run([sys.executable, submitter, "sub-m-1", "sub-m-2"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.splitlines() == ["sub-m-1 completed", "sub-m-2 completed"], \
        out.stderr + workers.log()
    # run again: the idempotency keys find the same runs, which have ended
    again = subprocess.run([sys.executable, submitter, "sub-m-1"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert again.stdout.splitlines() == ["sub-m-1 completed"]
    assert one(db, "SELECT count(*) FROM wfe.runs WHERE idempotency_key = 'ingest-sub-m-1'") == 1


def test_the_readme_async_submitter(definitions: None, db: psycopg.Connection, workers: Workers) -> None:
    import subprocess
    import sys
    for q in MODEL_INGEST:
        db.execute("SELECT wfe.configure_queue(%s, 'poll')", (q,))
    workers.start({"WFE_DSN": DSN}, script=readme_example("model_ingest_worker.py"))
    out = subprocess.run([sys.executable, readme_example("async_submitter.py"), "aio-m-1", "aio-m-2", "aio-m-3"],
                         env=dict(os.environ, WFE_DSN=DSN), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.splitlines() == [f"aio-m-{i} completed" for i in (1, 2, 3)], \
        out.stderr + workers.log()
    assert one(db, "SELECT count(*) FROM wfe.runs WHERE idempotency_key LIKE 'ingest-aio-m-%%'") == 3
