"""Waiting for runs: LISTEN wfe_run_done, sent when a run ends (docs/runtime.md)."""
from __future__ import annotations

import time
from typing import Any, Dict, Optional

from . import calls
from .notify import Listener

FINISHED = ("completed", "failed", "cancelled")


class RunTimeout(TimeoutError):
    """wait_for_run's timeout passed before the run ended; `report` is its last report."""

    def __init__(self, run_id: int, report: Dict[str, Any]) -> None:
        super().__init__(f"run {run_id} has not finished (state {report.get('state')})")
        self.run_id = run_id
        self.report = report


def wait_for_run(conninfo: str, run_id: int, timeout: Optional[float] = None) -> Dict[str, Any]:
    """Block until run_id is completed, failed or cancelled; return its report.

    Listens before it looks, so an end that commits in between is not missed;
    looks again every 5 s anyway (a notification is lost while the link is down).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    listener = Listener(conninfo, ["wfe_run_done"])
    try:
        while True:
            rep = calls.report(listener.conn, run_id)
            if rep.get("state") in FINISHED:
                return rep
            left = 5.0 if deadline is None else min(5.0, deadline - time.monotonic())
            if left <= 0:
                raise RunTimeout(run_id, rep)
            listener.wait(left, lambda n: n[1] == str(run_id))
    finally:
        listener.close()
