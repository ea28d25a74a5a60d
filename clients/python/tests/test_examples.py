"""The example workflows (examples/*.yaml) run to completion through the client, in both delivery modes,
with the README's model-ingest worker (clients/python/examples/model_ingest_worker.py)."""
from __future__ import annotations

import os
import re
from typing import Dict, Iterator

import psycopg
import pytest

import wfe
from conftest import DSN, HERE, TOP, Workers, needs_broker, one, wait_until

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
    workers.start(env, script=os.path.join(EXAMPLES, "model_ingest_worker.py"))
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


def test_the_readme_worker_is_20_lines_and_in_the_readme() -> None:
    code = open(os.path.join(EXAMPLES, "model_ingest_worker.py")).read()
    assert len(code.splitlines()) <= 20
    readme = open(os.path.join(os.path.dirname(HERE), "README.md")).read()
    assert code.strip() in readme


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


def test_the_readme_review_worker(definitions: None, db: psycopg.Connection, workers: Workers) -> None:
    code = open(os.path.join(EXAMPLES, "review_worker.py")).read()
    assert len(code.splitlines()) <= 15 and code.strip() in open(os.path.join(os.path.dirname(HERE), "README.md")).read()
    db.execute("SELECT wfe.configure_queue('payments-review', 'poll')")
    workers.start({"WFE_DSN": DSN}, script=os.path.join(EXAMPLES, "review_worker.py"))
    run = wfe.submit(db, "payment-routing", {"amount": 150000, "account": "acc-big"}).run_id
    rep = wfe.wait_for_run(DSN, run, timeout=30)
    assert [s["result"] for s in rep["stages"] if s["stage"] == "high-value"] == [{"approved": False}], workers.log()
    assert f"run {run} stage high-value attempt 1: complete" in wait_until(
        lambda: f"run {run} stage" in workers.log() and workers.log(), 5)


def test_the_readme_submitter(definitions: None, db: psycopg.Connection, workers: Workers) -> None:
    import subprocess
    import sys
    code = open(os.path.join(EXAMPLES, "model_ingest_submitter.py")).read()
    assert len(code.splitlines()) <= 12 and code.strip() in open(os.path.join(os.path.dirname(HERE), "README.md")).read()
    for q in MODEL_INGEST:
        db.execute("SELECT wfe.configure_queue(%s, 'poll')", (q,))
    workers.start({"WFE_DSN": DSN}, script=os.path.join(EXAMPLES, "model_ingest_worker.py"))
    env = dict(os.environ, WFE_DSN=DSN)
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "model_ingest_submitter.py"), "sub-m-1", "sub-m-2"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.splitlines() == ["sub-m-1 completed", "sub-m-2 completed"], \
        out.stderr + workers.log()
    # run again: the idempotency keys find the same runs, which have ended
    again = subprocess.run([sys.executable, os.path.join(EXAMPLES, "model_ingest_submitter.py"), "sub-m-1"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert again.stdout.splitlines() == ["sub-m-1 completed"]
    assert one(db, "SELECT count(*) FROM wfe.runs WHERE idempotency_key = 'ingest-sub-m-1'") == 1
