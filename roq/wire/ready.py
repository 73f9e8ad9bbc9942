"""A process's ready line: ``READY {json}`` on its standard output once it serves, how whoever started it
learns its endpoints.

One shape per role (:mod:`roq.wire.shape`), each naming its role (``ROLE``, the line's ``role``) and its process id:
:class:`GcmReady`, :class:`HostManagerReady`, :class:`MonitorReady`, :class:`ExchangeReady`,
:class:`JournalReady`, :class:`LinkReady`; another layer's processes register theirs (:func:`register`). A process prints its own
(:func:`roq.runtime.announce_ready`); a launcher reads it with :func:`decode`, once, where it reads the child's
output (:class:`roq.process.Child`), and then by attribute.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar, TypeVar

from roq.wire import shape
from roq.errors import ProtocolError

__all__ = ["PREFIX", "Ready", "GcmReady", "HostManagerReady", "MonitorReady", "ExchangeReady", "JournalReady",
           "LinkReady", "ShipperReady", "register", "decode"]

PREFIX = "READY "
MAX_LINE = 64 * 1024  # characters of a ready line read at most

R = TypeVar("R", bound="type[Ready]")


@dataclasses.dataclass(frozen=True)
class Ready:
    """What every ready line says: the process's role (``ROLE``) and id."""

    ROLE: ClassVar[str] = ""
    pid: int

    def line(self) -> str:
        """The ready line, without its newline."""
        return PREFIX + json.dumps({"role": self.ROLE, **shape.to_document(self)})


_ROLES: dict[str, type[Ready]] = {}


def register(cls: R) -> R:
    """Class decorator: the ready lines of role ``cls.ROLE`` are read as ``cls``.

    Raises:
        ValueError: another shape has that role.
    """
    if not cls.ROLE or _ROLES.get(cls.ROLE, cls) is not cls:
        raise ValueError(f"ready line role {cls.ROLE!r} empty or registered twice")
    shape.compile_shape(cls)
    _ROLES[cls.ROLE] = cls
    return cls


@register
@dataclasses.dataclass(frozen=True)
class GcmReady(Ready):
    ROLE: ClassVar[str] = "gcm"
    id: str
    leader: bool
    lookup: str
    management: str
    broadcast: str
    http: str  # "" without an HTTP API


@register
@dataclasses.dataclass(frozen=True)
class HostManagerReady(Ready):
    ROLE: ClassVar[str] = "hostmanager"
    address: str
    endpoint: str  # its control port
    http: str  # its health checks ("" none)


@register
@dataclasses.dataclass(frozen=True)
class MonitorReady(Ready):
    ROLE: ClassVar[str] = "monitor"
    queue: str
    endpoint: str


@register
@dataclasses.dataclass(frozen=True)
class ExchangeReady(Ready):
    ROLE: ClassVar[str] = "exchange"
    id: str
    frontend: str
    backend: str


@register
@dataclasses.dataclass(frozen=True)
class JournalReady(Ready):
    ROLE: ClassVar[str] = "journal"
    id: str
    intake: str
    incarnation: int
    reads: str  # its reads port ("" none)
    next_offset: int


@register
@dataclasses.dataclass(frozen=True)
class LinkReady(Ready):
    """A link between two clusters (``python -m client.link``)."""

    ROLE: ClassVar[str] = "link"
    name: str
    journal: str  # the source journal's reads port it follows
    position: int  # the offset in it it went on from
    epoch: int  # its first epoch



@register
@dataclasses.dataclass(frozen=True)
class ShipperReady(Ready):
    """A host's KPI shipper (``python -m client.shipper``)."""

    ROLE: ClassVar[str] = "shipper"
    host: str
    queue: str  # the KPI queue it ships to
    pending: int  # files put in place and not shipped yet, when it started

def decode(text: str) -> Ready:
    """The ready line ``text`` (``READY {json}``), as the shape of its role.

    Raises:
        ProtocolError: not a ready line, not JSON, a role nobody registered, or a field missing or of the wrong
            type (named).
    """
    if not text.startswith(PREFIX):
        raise ProtocolError(f"not a ready line: {text[:40]!r}")
    if len(text) > MAX_LINE:
        raise ProtocolError(f"a ready line of {len(text)} characters")
    try:
        doc: Any = json.loads(text[len(PREFIX):])
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"a ready line that is not JSON: {exc}") from exc
    role = doc.get("role") if type(doc) is dict else None
    cls = _ROLES.get(role) if type(role) is str else None
    if cls is None:
        raise ProtocolError(f"a ready line of no known role: {str(role)[:40]!r}")
    ready: Ready = shape.read(cls, doc, cls.__name__)
    return ready
