"""Fixtures of the client's tests: the harness's cluster (WFE_TEST_DSN), RabbitMQ (WFE_TEST_AMQP),
workflows made per test, and worker processes."""
from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

import psycopg
from psycopg.types.json import Jsonb
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DSN = os.environ.get("WFE_TEST_DSN", "")
AMQP = os.environ.get("WFE_TEST_AMQP", "")
TOP = os.environ.get("WFE_TEST_TOP", os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
WORKDIR = os.environ.get("WFE_TEST_WORKDIR", "/tmp")
_seq = itertools.count(1)

needs_broker = pytest.mark.skipif(not AMQP, reason="no private RabbitMQ node (WFE_TEST_AMQP)")


def pytest_collection_modifyitems(config: Any, items: List[Any]) -> None:
    """Without the harness's server (WFE_TEST_DSN) only the tests that need none run."""
    if not DSN:
        skip = pytest.mark.skip(reason="run through test/python/run.sh (WFE_TEST_DSN)")
        for item in items:
            if {"db", "workers", "definitions", "amqp"} & set(getattr(item, "fixturenames", ())):
                item.add_marker(skip)


def readme_example(name: str) -> str:
    """The README's code block marked ``<!-- example: NAME -->``, written to WORKDIR/NAME: its path.  The
    README is the examples' only copy: what it shows is what the tests run."""
    readme = open(os.path.join(os.path.dirname(HERE), "README.md")).read()
    m = re.search(r"<!-- example: " + re.escape(name) + r" -->\n```python\n(.*?)\n```", readme, re.S)
    assert m, f"no example {name} in the README"
    path = os.path.join(WORKDIR, name)
    with open(path, "w") as f:
        f.write(m.group(1) + "\n")
    return path


def wait_until(pred: Callable[[], Any], timeout: float, every: float = 0.1) -> Any:
    """pred()'s first truthy value within timeout seconds, else its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


@pytest.fixture
def db() -> Iterator[psycopg.Connection]:
    with psycopg.connect(DSN, autocommit=True) as conn:
        yield conn


def one(db: psycopg.Connection, sql: str, args: Any = ()) -> Any:
    row = db.execute(sql, args).fetchone()
    return row[0] if row else None


class Flow:
    """A one-stage workflow on a queue of its own: tag, queue, contract, workflow name."""

    def __init__(self, db: psycopg.Connection, extra: str = "", retry: str = "{ max_attempts: 3, initial_ms: 200, multiplier: 1.0, max_ms: 200, jitter: none }",
                 mode: str = "poll", output_schema: Optional[Dict[str, Any]] = None) -> None:
        n = next(_seq)
        self.tag = f"t{os.getpid()}x{n}"
        self.queue = f"pyq-{self.tag}"
        self.contract = f"py.{self.tag}@1"
        self.workflow = f"py-{self.tag}"
        db.execute("SELECT wfe.register_worker(%s, %s, NULL, %s)",
                   (self.contract, self.queue, Jsonb(output_schema) if output_schema is not None else None))
        db.execute("SELECT wfe.configure_queue(%s, %s)", (self.queue, mode))
        source = f"""
name: {self.workflow}
version: "1.0.0"
entry: work
defaults:
  retry: {retry}
stages:
  - name: work
    type: worker
    queue: {self.queue}
    worker: {self.contract}
    input: {{ spec: "${{context.spec}}" }}
{extra}    on_success: completed
    on_failure: failed
"""
        db.execute("SELECT wfe.create_definition(%s)", (source,))
        db.execute("SELECT wfe.approve(%s, '1.0.0')", (self.workflow,))
        db.execute("SELECT wfe.activate(%s, '1.0.0')", (self.workflow,))

    def env(self, **kw: Any) -> Dict[str, str]:
        out = {"QUEUES": self.queue, "CONTRACTS": self.contract}
        out.update({k: str(v) for k, v in kw.items()})
        return out


class Workers:
    """Worker processes started by a test, stopped (killed) at its end; logs under WORKDIR."""

    def __init__(self, name: str) -> None:
        self.name = name.replace("/", "_")
        self.procs: List[subprocess.Popen] = []
        self.exec_log = os.path.join(WORKDIR, f"{self.name}.exec")
        if os.path.exists(self.exec_log):
            os.unlink(self.exec_log)

    def start(self, env: Dict[str, str], script: str = os.path.join(HERE, "workers", "behave.py"),
              args: Optional[List[str]] = None) -> subprocess.Popen:
        full = dict(os.environ)
        full.update({"WFE_DSN": DSN, "WFE_AMQP_URL": AMQP, "EXEC_LOG": self.exec_log})
        full.update(env)
        log = open(os.path.join(WORKDIR, f"{self.name}.log"), "a")
        proc = subprocess.Popen([sys.executable, script] + (args or []), env=full, stdout=log,
                                stderr=subprocess.STDOUT, cwd=WORKDIR)
        self.procs.append(proc)
        return proc

    def executions(self, run_id: int, what: str = "start") -> List[str]:
        if not os.path.exists(self.exec_log):
            return []
        with open(self.exec_log) as f:
            return [line for line in f if line.split()[0] == str(run_id) and line.split()[3] == what]

    def log(self) -> str:
        path = os.path.join(WORKDIR, f"{self.name}.log")
        return open(path).read() if os.path.exists(path) else ""

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()


@pytest.fixture
def workers(request: Any) -> Iterator[Workers]:
    w = Workers(request.node.name)
    yield w
    w.stop_all()


def stage(db: psycopg.Connection, run_id: int, name: str = "work") -> Dict[str, Any]:
    cur = db.execute("SELECT * FROM wfe.run_stages WHERE run_id = %s AND stage = %s", (run_id, name))
    names = [c.name for c in cur.description]
    row = cur.fetchone()
    return dict(zip(names, row)) if row else {}


def events(db: psycopg.Connection, run_id: int, type_: str) -> List[Dict[str, Any]]:
    return [r[0] for r in db.execute("SELECT detail FROM wfe.events WHERE run_id = %s AND type = %s ORDER BY event_id",
                                     (run_id, type_)).fetchall()]
