"""Exceptions for wfe's errors, one class per SQLSTATE the API raises (docs/runtime.md, "SQLSTATEs")."""
from __future__ import annotations

import contextlib
import json
import re
from typing import Any, Dict, Iterator, List, Optional, Type

import psycopg


class WfeError(Exception):
    """An error raised by a wfe function; `sqlstate`, `detail` and `hint` come from the server."""

    sqlstate: Optional[str] = None

    def __init__(self, message: str, *, sqlstate: Optional[str] = None, detail: Optional[str] = None,
                 hint: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        if sqlstate is not None:
            self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint


class NullArgument(WfeError):
    """22004: a required argument is NULL."""
    sqlstate = "22004"


class InvalidArgument(WfeError):
    """22023: an argument has a bad value (context, options, a report, a payload reference, ...)."""
    sqlstate = "22023"


class InvalidDefinition(InvalidArgument):
    """22023 from create_definition: the source does not compile; `diagnostics` lists why."""

    @property
    def diagnostics(self) -> List[Dict[str, Any]]:
        """The compiler's diagnostics (code, message, path, line, column, severity)."""
        try:
            value = json.loads(self.detail or "[]")
        except ValueError:
            return []
        return value if isinstance(value, list) else []


class UnknownObject(WfeError):
    """42704: no such workflow, version, run, queue or payload."""
    sqlstate = "42704"


class WrongState(WfeError):
    """55000: the object is not in a state the call applies to (a draft, a broker queue, ...)."""
    sqlstate = "55000"


class LimitExceeded(WfeError):
    """54000 or 53400: a run-time limit refused the work; `limit` names it when the message does."""
    sqlstate = "54000"

    @property
    def limit(self) -> Optional[str]:
        """The limit's name: a setting (wfe.max_payload_bytes) quoted in the message, if any."""
        m = re.search(r"\b(wfe\.[a-z_]+)", " ".join(filter(None, [self.message, self.detail, self.hint])))
        return m.group(1) if m else None


class PermissionDenied(WfeError):
    """42501: the role lacks the wfe role (or the queue grant) the call needs."""
    sqlstate = "42501"


class RetrySubmit(WfeError):
    """40001: a concurrent submit with the same idempotency key won; submit again."""
    sqlstate = "40001"


class DataCorrupted(WfeError):
    """XX001: a stored payload no longer hashes to its key."""
    sqlstate = "XX001"


_BY_SQLSTATE: Dict[str, Type[WfeError]] = {
    "22004": NullArgument,
    "22023": InvalidArgument,
    "42704": UnknownObject,
    "55000": WrongState,
    "54000": LimitExceeded,
    "53400": LimitExceeded,
    "42501": PermissionDenied,
    "40001": RetrySubmit,
    "XX001": DataCorrupted,
}


def from_psycopg(exc: psycopg.Error) -> Optional[WfeError]:
    """The WfeError for a server error, or None when its SQLSTATE is not one of wfe's."""
    diag = exc.diag
    cls = _BY_SQLSTATE.get(diag.sqlstate or "")
    if cls is None:
        return None
    message = diag.message_primary or str(exc)
    if cls is InvalidArgument and message.startswith("workflow definition is invalid"):
        cls = InvalidDefinition
    return cls(message, sqlstate=diag.sqlstate, detail=diag.message_detail, hint=diag.message_hint)


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Re-raise psycopg errors with a wfe SQLSTATE as WfeError subclasses (the original is the cause)."""
    try:
        yield
    except psycopg.Error as exc:
        mapped = from_psycopg(exc)
        if mapped is None:
            raise
        raise mapped from exc
