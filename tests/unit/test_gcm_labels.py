"""gcm._labels: the opaque labels that stand for clients' ids in what anyone may read."""

from __future__ import annotations

import re

from gcm._labels import Labels

ID = "3f9a7c0e5b2d4a1f8e6c9b0a7d5e3c1f"


def test_a_label_is_short_stable_for_one_gcm_and_another_under_another_key():
    labels = Labels()
    assert re.fullmatch(r"[0-9a-f]{8}", labels(ID)) and labels(ID) == labels(ID) and labels(ID) not in ID
    assert labels(ID) != labels(ID[:-1] + "0")
    assert Labels(b"k" * 16)(ID) == Labels(b"k" * 16)(ID) != Labels(b"j" * 16)(ID)
    assert Labels()(ID) != labels(ID)  # a new GCM's key (once in 4 billion they would agree)
    assert re.fullmatch(r"[0-9a-f]{8}", labels(None))  # whatever the status held


def test_an_event_names_its_client_by_label_in_its_fields_and_texts_and_is_otherwise_untouched():
    labels = Labels()
    event = {"seq": 3, "kind": "relocated", "publisher": ID, "source": "x1-a", "duration_ms": 2.5,
             "text": f"publisher {ID[:8]} moved from x1-a to x2-b", "detail": f"publisher {ID} (10 rec/s)"}
    shown = labels.event(event)
    assert shown == {**event, "publisher": labels(ID), "text": f"publisher {labels(ID)} moved from x1-a to x2-b",
                     "detail": f"publisher {labels(ID)} (10 rec/s)"}
    assert event["publisher"] == ID  # the monitor's event itself is left as it was
    plain = {"seq": 4, "kind": "scale_out", "text": "scale out from 1 exchanges: load 95%"}
    assert labels.event(plain) == plain


def test_the_labels_kept_are_bounded_and_a_label_outlives_its_place_among_them():
    labels = Labels()
    first = labels(ID)
    for i in range(Labels.MAX_KEPT):
        labels(f"{i:032x}")
    assert len(labels._kept) <= Labels.MAX_KEPT and labels(ID) == first
