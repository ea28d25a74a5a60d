"""What a handler receives (Task) and what it may raise to control a failure (Fail)."""
from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import warnings
import uuid
from typing import Any, Dict, Optional

JSON = Any
"""A JSON value as psycopg and json load it: dict, list, str, int, float, bool or None."""


@dataclasses.dataclass
class Task:
    """One attempt of a stage, claimed (poll) or accepted (broker); the same for both modes."""

    run_id: int
    stage: str
    attempt: int
    fence: int
    queue: str
    contract: str
    """The contract ref of the worker or queued action, e.g. ``thumbnail.render@3``."""
    input: JSON
    tenant: str = "default"
    deadline_at: Optional[datetime.datetime] = None
    heartbeat_ms: Optional[int] = None
    execution_deadline_ms: Optional[int] = None
    definition_digest: Optional[str] = None
    message_id: Optional[uuid.UUID] = None
    payload_ref: Optional[Dict[str, Any]] = None
    traceparent: Optional[str] = None
    """W3C traceparent of this attempt's span: make the handler's spans its children."""
    mode: str = "poll"
    """``poll`` (claimed with claim_task) or ``broker`` (a RabbitMQ dispatch, accepted)."""
    stopped: threading.Event = dataclasses.field(default_factory=threading.Event, repr=False, compare=False)
    """Set when the attempt is no longer this worker's (a heartbeat answered stale/late/unknown,
    a cancellation request, or the worker stopping past its grace period): stop and return."""

    @property
    def ids(self) -> tuple:
        """(run_id, stage, attempt, fence): what every callback takes."""
        return (self.run_id, self.stage, self.attempt, self.fence)

    @property
    def log(self) -> "TaskLogger":
        """A logger for the handler: the ``wfe.task`` logger, each line prefixed with
        ``run R stage S attempt A:`` and the three in the record (``extra``) for structured handlers."""
        return TaskLogger(self)

    @property
    def idempotency_key(self) -> str:
        """``<run>:<stage>:<attempt>``: a key for side effects the task makes elsewhere."""
        return f"{self.run_id}:{self.stage}:{self.attempt}"

    @property
    def contract_name(self) -> str:
        """The contract's name without its version (``thumbnail.render``)."""
        return self.contract.split("@", 1)[0]

    @property
    def worker(self) -> str:
        """Deprecated alias of contract (it holds a contract ref, not a worker); removed in 0.4.0."""
        warnings.warn("Task.worker is deprecated: use Task.contract", DeprecationWarning, stacklevel=2)
        return self.contract

    @worker.setter
    def worker(self, value: str) -> None:
        warnings.warn("Task.worker is deprecated: use Task.contract", DeprecationWarning, stacklevel=2)
        self.contract = value


class Fail(Exception):
    """Raise from a handler to fail the attempt with this error code (any other exception
    fails it with the exception's class name as code).  ``retryable=False`` fails the stage
    at once: use it when trying again cannot help (bad input)."""

    def __init__(self, code: str, message: str = "", *, retryable: bool = True,
                 details: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message or code)
        self.code = code
        self.message = message or code
        self.retryable = retryable
        self.details = dict(details or {})

    def error(self) -> Dict[str, Any]:
        """The error object given to wfe.fail_task."""
        return {**self.details, "code": self.code, "message": self.message}


class TaskLogger(logging.LoggerAdapter):
    """Task.log: the ``wfe.task`` logger with the attempt's run, stage and attempt on every line."""

    def __init__(self, task: Task) -> None:
        super().__init__(logging.getLogger("wfe.task"),
                         {"run_id": task.run_id, "stage": task.stage, "attempt": task.attempt,
                          "queue": task.queue, "tenant": task.tenant})

    def process(self, msg: Any, kwargs: Any) -> Any:
        """Prefix the message; merge the attempt's fields into the record's extra."""
        e = self.extra
        kwargs["extra"] = {**e, **kwargs.get("extra", {})}  # type: ignore[dict-item]
        return f"run {e['run_id']} stage {e['stage']} attempt {e['attempt']}: {msg}", kwargs  # type: ignore[index]
