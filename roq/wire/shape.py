"""Shapes: frozen dataclasses whose fields are checked whenever a document is read into one.

One mechanism for every shape that crosses a process boundary: control messages (BSON, :mod:`roq.wire.control`),
ZooKeeper documents (JSON, :mod:`roq.wire.documents`) and KPI archive records (JSON lines, :mod:`roq.kpi.records`).
A shape's fields may be ``str``, ``int``, ``float``, ``bool``, ``bytes``, ``dict`` (a JSON document),
``dict[str, X]``, ``list[X]``, ``X | None`` or another shape. :func:`read` builds a shape from a decoded
document and checks every field: presence (a field without a default is required), type, and range;
:func:`to_document` is its inverse. A field declared with :func:`optional` is one a document may lack: it
reads as None, and is left out of the document while None, so that such a document reads back as it was.

Reading is strict about types because the documents come from anyone on the network:

* a value must be of the builtin type itself, not a subclass that only looks like one: ``bson.Code`` is a
  ``str`` (and unhashable), ``bson.Binary`` is ``bytes``, ``bson.Int64`` is an ``int``; text must be exactly
  ``str``, the others are converted to their builtin type;
* booleans are not numbers; floats are finite; integers fit in 64 bits;
* a ``dict`` field holds plain JSON only (no datetime, ObjectId, Binary...), at most :data:`MAX_DEPTH`
  levels deep, and is copied.

Every failure is a :class:`~roq.errors.ProtocolError` naming the field.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Callable

from roq.errors import ProtocolError

__all__ = ["compile_shape", "read", "to_document", "optional", "json_value", "MAX_DEPTH"]

#: deepest nesting accepted in a JSON document field (``{"a": {"b": ...}}`` is depth 2)
MAX_DEPTH = 16
_INT64 = 1 << 63

_OMIT = "roq.wire.shape.omit"  # the metadata key of a field left out of the document while None

Check = Callable[[Any, str], Any]
_SPECS: dict[type, tuple[tuple[str, Check, bool], ...]] = {}
#: a shape's fields as :func:`read` goes through them: (name, check, required, the builtin type a value of
#: which needs no other check than its range, if any)
_FIELDS: dict[type, tuple[tuple[str, Check, bool, type | None], ...]] = {}
_SCALARS = (str, bool, int, float)
_NAMES: dict[type, tuple[tuple[str, bool], ...]] = {}  # a shape's fields, each with whether it is optional
_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})


def optional() -> Any:
    """A field that a document may lack (its type ``X | None``): None when it does, and left out of the
    document while it is None."""
    return dataclasses.field(default=None, metadata={_OMIT: True})


def compile_shape(cls: type) -> tuple[tuple[str, Check, bool], ...]:
    """The (name, check, required) of every field of the dataclass ``cls`` (computed once)."""
    spec = _SPECS.get(cls)
    if spec is None:
        hints = typing.get_type_hints(cls)
        spec = tuple(
            (f.name, _checker(hints[f.name]),
             f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
            for f in dataclasses.fields(cls)
        )
        _SPECS[cls] = spec
    return spec


def read(cls: type, doc: Any, where: str = "") -> Any:
    """Build the shape ``cls`` from the decoded document ``doc``; keys it does not know are ignored.

    Raises:
        ProtocolError: ``doc`` is not a document, a required field is missing, or a value is of the wrong
            type or out of range (the message names the field).
    """
    if type(doc) is not dict:
        raise ProtocolError(f"{where or cls.__name__} must be a document, got {type(doc).__name__}")
    fields = _FIELDS.get(cls)
    if fields is None:
        hints = typing.get_type_hints(cls)
        fields = _FIELDS[cls] = tuple((name, check, required, _scalar(hints[name]))
                                      for name, check, required in compile_shape(cls))
    values = {}
    for name, check, required, plain in fields:
        if name in doc:
            value = doc[name]
            if _ready(plain, value):
                values[name] = value
            else:
                values[name] = check(value, f"{where}.{name}" if where else name)
        elif required:
            inside = f"{where}: " if where and where != cls.__name__ else ""
            raise ProtocolError(f"{inside}{cls.__name__} lacks field {name!r}")
    return cls(**values)


def _scalar(hint: Any) -> type | None:
    """The builtin type of a field of type ``hint`` whose values need no other check than their range (``str``,
    ``bool``, ``int``, ``float``, or one of them or None), else None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else None
    return hint if hint in _SCALARS else None


def to_document(obj: Any) -> Any:
    """A shape (or a list or mapping of them) as plain documents, ready for BSON or JSON (an :func:`optional`
    field that is None left out)."""
    kind = type(obj)
    if kind in _PLAIN:
        return obj
    if kind is list:
        return [to_document(x) for x in obj]
    if kind is dict:
        return {k: to_document(v) for k, v in obj.items()}
    names = _NAMES.get(kind)
    if names is None:
        if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
            if isinstance(obj, list):
                return [to_document(x) for x in obj]
            if isinstance(obj, dict):
                return {k: to_document(v) for k, v in obj.items()}
            return obj
        names = _NAMES[kind] = tuple((f.name, bool(f.metadata.get(_OMIT))) for f in dataclasses.fields(obj))
    out = {}
    for name, omit in names:
        value = getattr(obj, name)
        if value is None and omit:
            continue
        out[name] = to_document(value)
    return out


def json_value(value: Any, where: str, depth: int = 0, *, binary: bool = False) -> Any:
    """A plain copy of the JSON value ``value`` (None, bool, int, float, str, list, dict with str keys; with
    ``binary``, bytes too, as BSON carries them).

    Raises:
        ProtocolError: another type (named with its place), a non-finite float, or nested too deep.
    """
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return _int(value, where)
    if kind is float:
        return _finite(value, where)
    if binary and isinstance(value, bytes):
        return bytes(value)
    if depth >= MAX_DEPTH:
        raise ProtocolError(f"{where} is nested more than {MAX_DEPTH} levels deep")
    if kind is list:
        return [v if _plain(v) else json_value(v, f"{where}[{i}]", depth + 1, binary=binary)
                for i, v in enumerate(value)]
    if kind is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise ProtocolError(f"{where} has a key of type {type(k).__name__}; keys are text")
            out[k] = v if _plain(v) else json_value(v, f"{where}.{k}", depth + 1, binary=binary)
        return out
    raise ProtocolError(f"{where} holds a {kind.__name__}; only JSON values are accepted")


def _plain(value: Any) -> bool:
    """Whether ``value`` is a JSON value that needs no copy nor any other check (the common case, checked without
    making its place's name)."""
    kind = type(value)
    return (kind is str or value is None or kind is bool or (kind is int and -_INT64 <= value < _INT64)
            or (kind is float and value - value == 0.0))


def _int(value: Any, where: str) -> int:
    value = int(value)
    if not -_INT64 <= value < _INT64:
        raise ProtocolError(f"field {where!r} does not fit in 64 bits")
    return value


def _finite(value: float, where: str) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ProtocolError(f"field {where!r} must be a finite number, got {value!r}")
    return value


def _checker(hint: Any) -> Check:
    """A function that validates (and, for nested shapes, builds) a decoded value of type ``hint``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        inner = _checker(args[0])
        return lambda v, name: None if v is None else inner(v, name)
    if origin is list:
        (item_hint,) = typing.get_args(hint)
        item, item_type = _checker(item_hint), _scalar(item_hint)

        def check_list(v: Any, name: str) -> list[Any]:
            if type(v) is not list:
                raise ProtocolError(f"field {name!r} must be a list, got {type(v).__name__}")
            return [x if _ready(item_type, x) else item(x, f"{name}[{i}]") for i, x in enumerate(v)]

        return check_list
    if origin is dict:
        key_hint, value_hint = typing.get_args(hint)
        if key_hint is not str:
            raise TypeError(f"mapping keys must be str, got {key_hint!r}")
        if value_hint is Any:
            return _check_document
        value_check, value_type = _checker(value_hint), _scalar(value_hint)

        def check_mapping(v: Any, name: str) -> dict[str, Any]:
            if type(v) is not dict:
                raise ProtocolError(f"field {name!r} must be a document, got {type(v).__name__}")
            out = {}
            for k, x in v.items():
                if type(k) is not str:
                    raise ProtocolError(f"field {name!r} has a key of type {type(k).__name__}")
                out[k] = x if _ready(value_type, x) else value_check(x, f"{name}.{k}")
            return out

        return check_mapping
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):  # a hint that is a dataclass is its class
        compile_shape(hint)
        return lambda v, name: read(hint, v, name)
    if hint is float:

        def check_float(v: Any, name: str) -> float:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ProtocolError(f"field {name!r} must be a number, got {type(v).__name__}")
            return _finite(v, name)

        return check_float
    if hint is int:

        def check_int(v: Any, name: str) -> int:
            if isinstance(v, bool) or not isinstance(v, int):
                raise ProtocolError(f"field {name!r} must be an integer, got {type(v).__name__}")
            return _int(v, name)

        return check_int
    if hint is str:

        def check_str(v: Any, name: str) -> str:
            if type(v) is not str:  # bson.Code is a str subclass: refuse it, never hash it
                raise ProtocolError(f"field {name!r} must be text, got {type(v).__name__}")
            return v

        return check_str
    if hint is bool:

        def check_bool(v: Any, name: str) -> bool:
            if type(v) is not bool:
                raise ProtocolError(f"field {name!r} must be true or false, got {type(v).__name__}")
            return v

        return check_bool
    if hint is bytes:

        def check_bytes(v: Any, name: str) -> bytes:
            if not isinstance(v, bytes):
                raise ProtocolError(f"field {name!r} must be binary, got {type(v).__name__}")
            return bytes(v)

        return check_bytes
    if hint is dict:
        return _check_document
    raise TypeError(f"unsupported field type {hint!r}")


def _check_document(v: Any, name: str) -> dict[str, Any]:
    """A field of type ``dict`` or ``dict[str, Any]``: a JSON document (copied)."""
    if type(v) is not dict:
        raise ProtocolError(f"field {name!r} must be a document, got {type(v).__name__}")
    out: dict[str, Any] = json_value(v, name)
    return out


def _ready(plain: type | None, value: Any) -> bool:
    """Whether ``value`` is of exactly the builtin type ``plain`` (:func:`_scalar`) and in its range: the common
    case, accepted as it is without making its place's name."""
    kind = type(value)
    return kind is plain and (kind is str or kind is bool or (kind is int and -_INT64 <= value < _INT64)
                              or (kind is float and value - value == 0.0))  # finite: inf - inf is nan
