"""Typed inputs and results: a handler's input made a dataclass or pydantic model, its result checked and made JSON.

A handler registered with ``input=`` gets ``task.input`` as an instance of
that type; one registered with ``output=`` (or whose return annotation is a
dataclass or pydantic model) has its result checked against that type
before it is reported.  An input that does not fit fails the attempt as
``input.invalid``, not retryable (the same input fails again); a result that
does not fit is refused like any result that cannot be reported
(``result.refused``).  pydantic models work when the program uses pydantic
(1.x, as Debian 12 has it, or 2.x; the client never imports it itself);
dataclasses need nothing.

Dataclass checks are shallow on purpose: each field's value against its
annotation when that is a plain type (str, int, float, bool, list, dict, a
nested dataclass, Optional of one of these); anything richer is pydantic's
job.  The contract's JSON Schema stays the last word: the server checks the
result against it (``invalid_result``).
"""
from __future__ import annotations

import dataclasses
import sys
import typing
from typing import Any, Callable, Dict, Optional, Tuple



def _pyd() -> Any:
    """pydantic if the program imported it, else None: a pydantic model's class implies its module is loaded,
    so the client never pays pydantic's import time itself (half a second, for workers that do not use it)."""
    return sys.modules.get("pydantic")


class TypeMismatch(ValueError):
    """A value does not fit the declared type; the message says where and why."""


def is_model(tp: Any) -> bool:
    """True for a dataclass type or a pydantic model class: the types this module converts."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return True
    pyd = _pyd()
    return pyd is not None and isinstance(tp, type) and issubclass(tp, pyd.BaseModel)


def return_type(fn: Callable[..., Any]) -> Optional[type]:
    """fn's return annotation when it is a dataclass or pydantic model (None otherwise, or unresolvable)."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # a forward reference that does not resolve: no typed result
        return None
    tp = hints.get("return")
    return tp if is_model(tp) else None


def load(tp: type, value: Any) -> Any:
    """value (JSON) as an instance of tp, or TypeMismatch."""
    pyd = _pyd()
    if pyd is not None and issubclass(tp, pyd.BaseModel):
        try:
            if hasattr(tp, "model_validate"):
                return tp.model_validate(value)  # pydantic 2
            return tp.parse_obj(value)  # pydantic 1
        except pyd.ValidationError as exc:
            raise TypeMismatch(_pydantic_message(exc)) from None
    return _load_dataclass(tp, value, tp.__name__)


def dump(tp: Optional[type], value: Any) -> Any:
    """A result as JSON-ready data: checked against tp when given; any dataclass or model made a dict."""
    pyd = _pyd()
    if tp is not None:
        if pyd is not None and issubclass(tp, pyd.BaseModel):
            if not isinstance(value, tp):
                value = load(tp, value)  # a dict is validated as the model would be
        elif isinstance(value, dict):
            value = _load_dataclass(tp, value, tp.__name__)
        elif not isinstance(value, tp):
            raise TypeMismatch(f"the result is a {type(value).__name__}, not a {tp.__name__}")
        else:
            _check_dataclass(value, tp.__name__)
    if pyd is not None and isinstance(value, pyd.BaseModel):
        if hasattr(value, "model_dump"):
            return value.model_dump(mode="json")
        import json
        return json.loads(value.json())  # pydantic 1: its own JSON encoders (datetime, UUID, ...)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def _pydantic_message(exc: Any) -> str:
    """A pydantic ValidationError in one line: each error's location and message."""
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        parts.append(f"{where}: {err.get('msg')}")
    return "; ".join(parts)


def _hints(tp: type) -> Dict[str, Any]:
    """tp's field annotations, resolved; one that does not resolve (a class local to a function, under
    ``from __future__ import annotations``) is Any: not checked."""
    try:
        return typing.get_type_hints(tp)
    except Exception:
        pass
    hints: Dict[str, Any] = {}
    module = vars(sys.modules.get(tp.__module__, object()))
    for f in dataclasses.fields(tp):
        try:
            hints[f.name] = eval(f.type, module) if isinstance(f.type, str) else f.type  # noqa: S307 - annotations
        except Exception:
            hints[f.name] = Any
    return hints


def _load_dataclass(tp: type, value: Any, where: str) -> Any:
    """A dataclass instance from a JSON object; keys the class has no field for are ignored."""
    if not isinstance(value, dict):
        raise TypeMismatch(f"{where}: expected an object, not {_kind(value)}")
    hints = _hints(tp)
    kwargs: Dict[str, Any] = {}
    for f in dataclasses.fields(tp):
        if not f.init:
            continue
        if f.name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
                raise TypeMismatch(f"{where}.{f.name}: required, missing")
            continue
        kwargs[f.name] = _fit(hints.get(f.name, Any), value[f.name], f"{where}.{f.name}")
    return tp(**kwargs)


def _check_dataclass(obj: Any, where: str) -> None:
    """Each field of a dataclass instance against its annotation (as _fit checks a loaded value)."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        _fit(hints.get(f.name, Any), getattr(obj, f.name), f"{where}.{f.name}", check_only=True)


_PLAIN: Dict[Any, Tuple[type, ...]] = {str: (str,), int: (int,), float: (int, float), bool: (bool,),
                                       list: (list, tuple), dict: (dict,)}


def _fit(tp: Any, value: Any, where: str, check_only: bool = False) -> Any:
    """value checked against annotation tp (nested dataclasses loaded unless check_only)."""
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _fit(arg, value, where, check_only)
            except TypeMismatch as exc:
                errors.append(str(exc))
        raise TypeMismatch(errors[0] if len(errors) == 1 else f"{where}: {_kind(value)} fits none of {tp}")
    base = origin or tp
    if isinstance(base, type) and dataclasses.is_dataclass(base):
        if check_only and isinstance(value, base):
            _check_dataclass(value, where)
            return value
        return _load_dataclass(base, value, where)
    allowed = _PLAIN.get(base)
    if allowed is None:
        return value  # Any, a TypeVar, a Literal, ...: not checked here
    if isinstance(value, bool) and base is not bool:
        raise TypeMismatch(f"{where}: expected {base.__name__}, not a boolean")
    if not isinstance(value, allowed):
        raise TypeMismatch(f"{where}: expected {base.__name__}, not {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    """A value's JSON kind, for messages."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array",
            tuple: "an array", dict: "an object"}.get(type(value), f"a {type(value).__name__}")
