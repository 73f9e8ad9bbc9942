"""The wire envelope of every control message, and the one registry of command numbers.

Control traffic between exchanges, journals, monitors, host managers, GCMs and clients is one ZeroMQ frame
holding one BSON document with an int32 ``CMD``. Each message class declares its command number with
:func:`message`, which makes it a frozen dataclass and registers it here; :func:`encode` and :func:`decode`
are the only ways in and out, and :func:`decode` checks every field's presence and type (:mod:`roq.wire.shape`), so
a process never acts on a half-understood command.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, TypeVar, dataclass_transform

import bson
from bson.errors import BSONError

from roq.wire import shape
from roq.errors import ProtocolError, UnknownCommandError

__all__ = ["Message", "message", "registered", "encode", "decode", "decode_document"]


class Message:
    """Base of every control message; subclasses are frozen dataclasses registered with :func:`message`."""

    CMD: ClassVar[int]
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # every message class is a dataclass

    def document(self) -> dict[str, Any]:
        """The message as the document that is encoded (``CMD`` first)."""
        return {"CMD": self.CMD, **shape.to_document(self)}

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Message:
        """Build the message from a decoded document (its ``CMD`` already matched).

        Raises:
            ProtocolError: a field is missing or of the wrong type.
        """
        return shape.read(cls, doc)


_REGISTRY: dict[int, type[Message]] = {}
M = TypeVar("M", bound="type[Message]")


@dataclass_transform(frozen_default=True)
def message(cmd: int) -> Callable[[M], M]:
    """Class decorator: make ``cls`` a frozen dataclass and register it under command number ``cmd``."""

    def register(cls: M) -> M:
        if cmd in _REGISTRY:
            raise ValueError(f"command {cmd} registered twice ({_REGISTRY[cmd].__name__}, {cls.__name__})")
        dataclasses.dataclass(frozen=True)(cls)  # made a dataclass in place: without slots, the same class comes back
        cls.CMD = cmd
        shape.compile_shape(cls)
        _REGISTRY[cmd] = cls
        return cls

    return register


def registered() -> dict[int, type[Message]]:
    """Every message class by command number (control messages, and the GCM's once :mod:`roq.wire.management` is
    imported)."""
    return dict(_REGISTRY)


def encode(msg: Message) -> bytes:
    """Encode a control message as one BSON document.

    Raises:
        ProtocolError: a value cannot be represented in BSON (e.g. an integer beyond 64 bits).
    """
    try:
        return bson.encode(msg.document())
    except (BSONError, OverflowError, TypeError, ValueError) as exc:
        raise ProtocolError(f"cannot encode {type(msg).__name__}: {exc}") from exc


def decode_document(data: bytes) -> dict[str, Any]:
    """The BSON document in ``data``.

    Raises:
        ProtocolError: not one BSON document.
    """
    try:
        doc = bson.decode(data)
    except (BSONError, ValueError, TypeError, OverflowError, IndexError, KeyError, RecursionError) as exc:
        raise ProtocolError(f"not a BSON document ({len(data)} bytes): {exc}") from exc
    if type(doc) is not dict:  # pragma: no cover - bson.decode gives a dict unless told otherwise
        raise ProtocolError("not a BSON document")
    return doc


def decode(data: bytes) -> Message:
    """Decode and validate one control message.

    Raises:
        UnknownCommandError: a valid document with a command number nobody registered (``cmd`` says which).
        ProtocolError: not BSON, no int ``CMD``, or a field missing or of the wrong type.
    """
    doc = decode_document(data)
    cmd = doc.get("CMD")
    if isinstance(cmd, bool) or not isinstance(cmd, int):
        raise ProtocolError(f"document without an integer CMD (got {type(cmd).__name__})")
    cls = _REGISTRY.get(cmd)
    if cls is None:
        err = UnknownCommandError(f"unknown command {cmd}")
        err.cmd = int(cmd)  # type: ignore[attr-defined]
        raise err
    return cls.from_document(doc)
