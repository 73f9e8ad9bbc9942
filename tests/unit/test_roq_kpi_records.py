"""roq.kpi.records: the archive's record shapes, and the Spark schema derived from them."""

from __future__ import annotations

import dataclasses

from roq.kpi.records import KINDS, RECORDS, EventRecord, ExchangeRecord, HostRecord, columns


def test_every_record_kind_is_named_once_and_every_plain_field_is_a_column():
    assert len(set(KINDS)) == len(KINDS) == len(RECORDS)
    names = dict(columns())
    assert list(names)[:2] == ["kind", "time"]
    for record in RECORDS:
        for f in dataclasses.fields(record):
            assert f.name in names or f.name == "fields", (record.__name__, f.name)
    assert names["records_in"] == "long" and names["cpu_percent"] == "double" and names["prefix"] == "string"
    assert names["exchange"] == "string" and "fields" not in names  # optional in an event, a document stays JSON


def test_a_host_record_has_the_cpu_of_its_period_beside_the_mean_placement_uses():
    assert {"cpu_percent_now", "cpu_percent"} <= {f.name for f in dataclasses.fields(HostRecord)}
    assert ExchangeRecord.KIND == "exchange" and EventRecord("relocated", "moved").fields == {}
