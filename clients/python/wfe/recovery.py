"""The operator's recovery calls (docs/operations.md "Recovery"), for wfe_operator roles.

Each goes through the engine's gate, as the SQL functions do: a late report of
an attempt that was redriven or failed by hand is stale.  Refusals raise the
exception of their SQLSTATE (WrongState for a stage in the wrong state,
UnknownObject for no such run or stage, PermissionDenied without the role).
"""
from __future__ import annotations

import datetime
from typing import Optional

from psycopg.types.json import Jsonb

from .calls import Executor, _one
from .task import JSON


def redrive(db: Executor, run_id: int, stage: str, reason: Optional[str] = None) -> None:
    """wfe.redrive: run a failed or timed-out stage again (a new attempt, a new fence)."""
    _one(db, "SELECT wfe.redrive(%s, %s, %s)::text", (run_id, stage, reason))


def skip_stage(db: Executor, run_id: int, stage: str, result: JSON = None,
               reason: Optional[str] = None) -> None:
    """wfe.skip_stage: complete a stage by hand with result; the run goes on as if it had run."""
    _one(db, "SELECT wfe.skip_stage(%s, %s, %s, %s)::text",
         (run_id, stage, Jsonb(result if result is not None else {}), reason))


def fail_stage(db: Executor, run_id: int, stage: str, reason: str) -> None:
    """wfe.fail_stage: fail an attempt under way by hand (fenced, no retry, its failure route taken)."""
    _one(db, "SELECT wfe.fail_stage(%s, %s, %s)::text", (run_id, stage, reason))


def redispatch(db: Executor, run_id: int, stage: str, reason: Optional[str] = None) -> None:
    """wfe.redispatch: send a broker attempt again under a new fence."""
    _one(db, "SELECT wfe.redispatch(%s, %s, %s)::text", (run_id, stage, reason))


def replay(db: Executor, run_id: int, reason: Optional[str] = None) -> int:
    """wfe.replay: a new run of the same pinned plan and context, linked to run_id; its id."""
    return int(_one(db, "SELECT wfe.replay(%s, %s)", (run_id, reason)))


def redrive_dead_letters(db: Executor, queue: str,
                         since: Optional[datetime.datetime] = None, reason: Optional[str] = None) -> int:
    """wfe.redrive_dead_letters: redrive every open dead letter of queue since `since`; how many."""
    if since is None:
        return int(_one(db, "SELECT wfe.redrive_dead_letters(%s, '-infinity', %s)", (queue, reason)))
    return int(_one(db, "SELECT wfe.redrive_dead_letters(%s, %s, %s)", (queue, since, reason)))
