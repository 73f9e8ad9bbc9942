"""The ready line: each role's shape, written and read back; a line that is not one is a ProtocolError naming
what is wrong."""

from __future__ import annotations

import dataclasses
import json

import pytest

from roq.errors import ProtocolError
from roq.wire.ready import (PREFIX, ExchangeReady, GcmReady, HostManagerReady, JournalReady, MonitorReady, Ready, decode,
                       register)

LINES = [
    GcmReady(pid=1, id="gcm1", leader=True, lookup="tcp://127.0.0.1:5550", management="tcp://127.0.0.1:5551",
             broadcast="tcp://127.0.0.1:5552", http=""),
    HostManagerReady(pid=2, address="127.0.0.11", endpoint="tcp://127.0.0.11:4000", http="http://127.0.0.11:4080"),
    MonitorReady(pid=3, queue="orders", endpoint="tcp://127.0.0.11:5500"),
    ExchangeReady(pid=4, id="x1-ab12", frontend="tcp://127.0.0.11:6000", backend="tcp://127.0.0.11:6001"),
    JournalReady(pid=5, id="j1", intake="tcp://127.0.0.11:7000", incarnation=2, reads="tcp://127.0.0.11:7001",
                 next_offset=42),
]


@pytest.mark.parametrize("ready", LINES, ids=lambda r: r.ROLE)
def test_each_roles_line_reads_back_as_its_shape(ready):
    line = ready.line()
    assert line.startswith(PREFIX) and "\n" not in line
    doc = json.loads(line[len(PREFIX):])
    assert list(doc)[:2] == ["role", "pid"] and doc["role"] == ready.ROLE  # as the line always began
    assert decode(line) == ready and type(decode(line)) is type(ready)


@pytest.mark.parametrize("line, says", [
    ('READY {"role": "monitor", "pid": 3, "queue": "q"}', "MonitorReady lacks field 'endpoint'"),
    ('READY {"role": "monitor", "pid": true, "queue": "q", "endpoint": "e"}', "'MonitorReady.pid' must be an integer"),
    ('READY {"role": "journal", "pid": 1, "id": "j", "intake": "i", "incarnation": "2", "reads": "", "next_offset": 0}',
     "'JournalReady.incarnation' must be an integer, got str"),
    ('READY {"role": "gcm", "pid": 1, "id": "g", "leader": 1, "lookup": "", "management": "", "broadcast": "", '
     '"http": ""}', "'GcmReady.leader' must be true or false"),
    ('READY {"role": "poet", "pid": 1}', "no known role: 'poet'"),
    ('READY {"pid": 1}', "no known role"),
    ('READY ["role", "monitor"]', "no known role"),
    ("READY {nope", "not JSON"),
    ("READIED {}", "not a ready line"),
])
def test_a_line_that_is_not_a_ready_line_is_a_protocol_error(line, says):
    with pytest.raises(ProtocolError, match=says):
        decode(line)


def test_a_role_is_registered_once():
    @dataclasses.dataclass(frozen=True)
    class Impostor(Ready):
        ROLE = "monitor"

    with pytest.raises(ValueError, match="registered twice"):
        register(Impostor)
