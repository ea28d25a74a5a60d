"""A handler's result, made JSON text in the handler's own thread and measured against the server's limits.

Serialising here, not in the reporter, is what keeps one bad result (a set, a
NaN, 100 MB) from reaching -- and breaking -- the thread every report goes
through: it fails its own attempt with ``result.refused`` instead.
"""
from __future__ import annotations

import json
from typing import Any, List, Tuple

from .task import JSON


class JsonText(str):
    """A value already serialised as JSON text (sent as jsonb without being encoded again)."""


class ResultRefused(ValueError):
    """The result cannot be reported: not JSON, too large or too deep (the message says which)."""


def depth(value: Any, limit: int) -> int:
    """The depth of value's deepest container (a scalar is 0, as wfe counts it), or limit + 1 once past limit."""
    deepest = 0
    stack: List[Tuple[Any, int]] = [(value, 0)]
    while stack:  # iterative: a deeply nested result must not exhaust the interpreter's stack
        v, d = stack.pop()
        if isinstance(v, dict):
            children = v.values()
        elif isinstance(v, (list, tuple)):
            children = v
        else:
            continue
        d += 1
        if d > deepest:
            deepest = d
            if deepest > limit:
                return deepest
        stack.extend((c, d) for c in children)
    return deepest


def encode(value: JSON, max_bytes: int, max_depth: int) -> JsonText:
    """value as JSON text, or ResultRefused saying why it cannot be reported."""
    if depth(value, max_depth) > max_depth:
        raise ResultRefused(f"the result is nested more than wfe.max_json_depth ({max_depth}) levels deep")
    try:
        text = json.dumps({} if value is None else value, allow_nan=False, ensure_ascii=False,
                          separators=(",", ":"))
    except (TypeError, ValueError) as exc:  # a set, an object, NaN, a circular reference, ...
        raise ResultRefused(f"the result is not JSON: {exc}") from None
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise ResultRefused(f"the result is {size} bytes, more than wfe.max_payload_bytes ({max_bytes})")
    return JsonText(text)
