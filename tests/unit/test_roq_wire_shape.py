"""Shapes: a document read into a shape is checked field by field, and the shape's document reads back as it was,
optional fields included."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import bson
import pytest

from roq.wire import shape
from roq.errors import ProtocolError


@dataclasses.dataclass(frozen=True)
class Inner:
    n: int
    label: str | None = shape.optional()


@dataclasses.dataclass(frozen=True)
class Outer:
    name: str
    items: list[Inner]
    rate: float = 0.0
    note: str | None = None  # None, but written (not optional)
    extra: dict[str, Inner] = dataclasses.field(default_factory=dict)


def test_an_optional_field_is_none_when_absent_and_left_out_of_the_document():
    doc = {"name": "q", "items": [{"n": 1}, {"n": 2, "label": "two"}], "rate": 1.5, "note": None,
           "extra": {"k": {"n": 3}}}
    out = shape.read(Outer, doc)
    assert out.items == [Inner(1), Inner(2, "two")] and out.items[0].label is None
    assert shape.to_document(out) == doc
    assert list(shape.to_document(Inner(1))) == ["n"]


def test_a_missing_field_of_a_nested_shape_is_named_with_where_it_is():
    with pytest.raises(ProtocolError, match=r"items\[1\]: Inner lacks field 'n'"):
        shape.read(Outer, {"name": "q", "items": [{"n": 1}, {"label": "x"}]})
    with pytest.raises(ProtocolError, match=r"^Outer lacks field 'items'"):
        shape.read(Outer, {"name": "q"})


@pytest.mark.parametrize("doc, field", [
    ({"name": "q", "items": [{"n": True}]}, "items[0].n"),
    ({"name": "q", "items": [], "rate": "fast"}, "rate"),
    ({"name": "q", "items": [], "rate": False}, "rate"),
    ({"name": "q", "items": [{"n": 1, "label": 5}]}, "items[0].label"),
    ({"name": 7, "items": []}, "name"),
])
def test_a_value_of_the_wrong_type_is_named(doc, field):
    with pytest.raises(ProtocolError, match=f"'{field}'".replace("[", r"\[").replace("]", r"\]")):
        shape.read(Outer, doc)


def test_to_document_leaves_plain_values_and_other_objects_as_they_are():
    assert shape.to_document([1, "a", None, b"x", (1, 2)]) == [1, "a", None, b"x", (1, 2)]
    assert shape.to_document({"a": [Inner(1, "one")]}) == {"a": [{"n": 1, "label": "one"}]}
    assert shape.to_document(Outer) is Outer  # a class is not a shape's value


@pytest.mark.parametrize("value, field", [
    (float("nan"), "rate"), (float("inf"), "rate"), (2**63, "items[0].n"), (True, "items[0].n"),
    (bson.Code("x"), "name"),
])
def test_what_looks_like_the_common_case_is_still_checked(value, field):
    doc = {"name": "q", "items": [{"n": 1}], "rate": 1.0}
    if field == "rate":
        doc["rate"] = value
    elif field == "name":
        doc["name"] = value
    else:
        doc["items"] = [{"n": value}]
    with pytest.raises(ProtocolError, match=f"'{field}'".replace("[", r"\[").replace("]", r"\]")):
        shape.read(Outer, doc)


def test_values_of_a_builtin_types_subclass_become_the_builtin_type():
    out = shape.read(Outer, {"name": "q", "items": [{"n": bson.Int64(5)}], "rate": 2})
    assert type(out.items[0].n) is int and type(out.rate) is float
    assert shape.json_value({"a": [1, {"b": bson.Int64(2)}]}, "doc") == {"a": [1, {"b": 2}]}
    with pytest.raises(ProtocolError, match=r"doc.a\[1\].b"):
        shape.json_value({"a": [1, {"b": float("inf")}]}, "doc")


@dataclasses.dataclass(frozen=True)
class Documents:
    one: dict[str, Any]
    many: list[dict[str, Any]]
    counts: dict[str, int]


def test_a_document_typed_dict_of_any_is_plain_json_and_mappings_check_their_values():
    doc = {"one": {"a": [1, {"b": None}]}, "many": [{"k": "v"}, {}], "counts": {"x": 1, "y": 2}}
    assert shape.to_document(shape.read(Documents, doc)) == doc
    with pytest.raises(ProtocolError, match=r"many\[1\].when"):
        shape.read(Documents, {**doc, "many": [{}, {"when": datetime.datetime.now()}]})
    with pytest.raises(ProtocolError, match=r"'counts.y' must be an integer, got bool"):
        shape.read(Documents, {**doc, "counts": {"x": 1, "y": True}})
