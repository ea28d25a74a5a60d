"""Trace context: each attempt's W3C traceparent, continued by OpenTelemetry when it is importable.

The server gives every attempt a traceparent (the claimed task's column, the
envelope's field): ``Task.traceparent``, whose span is the attempt's span in
``wfe.run_spans``.  A handler can pass it on by hand (an HTTP header, a
``TRACEPARENT`` variable).  When ``opentelemetry`` (the API package) is
importable, the client also runs each handler inside a span that is the
attempt span's child, current in the handler's thread (or task), so the
handler's own instrumented calls join the run's trace with nothing to
write.  Without it, or without a configured tracer provider, this costs
nothing.
"""
from __future__ import annotations

import contextlib
import re
from typing import Any, Iterator, Optional

try:  # optional
    from opentelemetry import trace as _otel_trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator as _Propagator
except ImportError:  # pragma: no cover - depends on the environment
    _otel_trace = None  # type: ignore[assignment]
    _Propagator = None  # type: ignore[assignment,misc]

# version-traceid-parentid-flags, the ids not all zero (W3C Trace Context, level 1)
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def parse(traceparent: Optional[str]) -> Optional[tuple]:
    """(trace_id, parent span id, flags) of a valid traceparent, else None."""
    m = _TRACEPARENT.match(traceparent or "")
    if not m or m.group(1) == "ff" or set(m.group(2)) == {"0"} or set(m.group(3)) == {"0"}:
        return None
    return m.group(2), m.group(3), m.group(4)


def available() -> bool:
    """True when opentelemetry's API is importable (spans are then made around handlers)."""
    return _otel_trace is not None


@contextlib.contextmanager
def span(task: Any) -> Iterator[Optional[Any]]:
    """The handler's span, child of the attempt's traceparent, current while the handler runs (OpenTelemetry
    importable and the traceparent valid); else nothing."""
    if _otel_trace is None or parse(task.traceparent) is None:
        yield None
        return
    parent = _Propagator().extract({"traceparent": task.traceparent})
    tracer = _otel_trace.get_tracer("wfe")
    with tracer.start_as_current_span(f"wfe {task.contract}", context=parent,
                                      kind=_otel_trace.SpanKind.CONSUMER,
                                      attributes={"wfe.run_id": task.run_id, "wfe.stage": task.stage,
                                                  "wfe.attempt": task.attempt, "wfe.queue": task.queue,
                                                  "wfe.delivery": task.mode}) as current:
        yield current
