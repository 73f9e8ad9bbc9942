"""The one answer every server gives: :class:`Reply`, a result code, a sentence and data.

A reply is encoded flat: ``{CMD: 9000, REQUEST: the command answered, RESULT: int32, COMMENT: str, ...data}``.
A management client that only reads ``RESULT`` and ``COMMENT`` (the original system's reply) reads ours too,
and ours reads the original's, which has no ``CMD`` (:meth:`Reply.parse`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from roq.wire import shape
from roq.wire.control.codec import Message, decode_document, message
from roq.errors import ManagementError, ProtocolError, Result, error_for

__all__ = ["REPLY", "Reply", "refusal"]

REPLY = 9000


@message(REPLY)
class Reply(Message):
    """The answer to a request: ``result`` (a :class:`Result` code), ``comment`` (a sentence), ``data``.

    Encoded flat, ``{CMD: 9000, REQUEST, RESULT, COMMENT, **data}``, so the data's keys must be none of
    those four.
    """

    request: int = 0
    result: int = Result.OK
    comment: str = ""
    data: dict = dataclasses.field(default_factory=dict)

    _OWN: ClassVar[tuple[str, ...]] = ("CMD", "REQUEST", "RESULT", "COMMENT")

    def document(self) -> dict[str, Any]:
        clash = [k for k in self.data if k in self._OWN]
        if clash:
            raise ProtocolError(f"reply data may not use the keys {clash}")
        return {"CMD": REPLY, "REQUEST": int(self.request), "RESULT": int(self.result), "COMMENT": self.comment,
                **self.data}

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Reply:
        """A reply from its document; ``CMD`` and ``REQUEST`` may be missing (a reply of the original system).

        Raises:
            ProtocolError: no integer RESULT, or a COMMENT that is not text.
        """
        rest = {k: v for k, v in doc.items() if k not in cls._OWN}
        result, request, comment = doc.get("RESULT"), doc.get("REQUEST", 0), doc.get("COMMENT", "")
        if isinstance(result, bool) or not isinstance(result, int):
            raise ProtocolError("reply without an integer RESULT")
        if isinstance(request, bool) or not isinstance(request, int):
            raise ProtocolError("reply with a REQUEST that is not an integer")
        if type(comment) is not str:
            raise ProtocolError("reply with a COMMENT that is not text")
        return cls(request=int(request), result=int(result), comment=comment, data=shape.json_value(rest, "reply", binary=True))

    @classmethod
    def parse(cls, frame: bytes) -> Reply:
        """Decode a reply frame (with or without ``CMD``).

        Raises:
            ProtocolError: not a reply.
        """
        return cls.from_document(decode_document(frame))

    @property
    def ok(self) -> bool:
        return self.result == Result.OK

    def raise_for(self) -> dict[str, Any]:
        """The data of a successful reply; raise the :class:`~roq.errors.ManagementError` of a refusal."""
        if self.result != Result.OK:
            raise error_for(self.result, self.comment, self.data)
        return self.data


def refusal(exc: ManagementError, request: int = 0) -> Reply:
    """The reply that answers a request refused with ``exc``."""
    return Reply(request=request, result=exc.code, comment=str(exc), data=exc.data)
