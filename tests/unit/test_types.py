"""The type check: mypy over every product package, held to a ratchet (``tests/typing.json``).

* ``errors``: the most errors mypy may find in the product packages (its configuration: ``[tool.mypy]`` in
  ``pyproject.toml``). The count may only fall: a change that fixes some lowers the number in the file with it.
* ``strict``: packages (or modules) that pass ``mypy --strict`` without an error of their own, and must go on
  passing it.
"""

from __future__ import annotations

import json
import re

import pytest
from mypy import api

from tests.unit.test_structure import PACKAGES, ROOT

RATCHET = ROOT / "tests" / "typing.json"
pytestmark = pytest.mark.one_at_a_time("types")  # one after another: they share mypy's cache


def _mypy(*args: str) -> tuple[int, str]:
    """The errors mypy finds with ``args``, and its report."""
    out, err, _status = api.run(["--config-file", str(ROOT / "pyproject.toml"), *args])
    found = re.search(r"Found (\d+) errors?", out)
    if found is None and "Success" not in out:
        pytest.fail(f"mypy did not run: {out}{err}")
    return (int(found.group(1)) if found else 0), out


def test_the_product_has_no_more_type_errors_than_the_ratchet_allows():
    allowed = json.loads(RATCHET.read_text())["errors"]
    errors, report = _mypy(*(str(ROOT / p) for p in PACKAGES))
    assert errors <= allowed, f"{errors} type errors, the ratchet allows {allowed}:\n{report}"
    if errors < allowed:
        print(f"{errors} type errors, {allowed} allowed: lower \"errors\" in {RATCHET.relative_to(ROOT)} to {errors}")


def test_the_strict_packages_stay_strict():
    strict = json.loads(RATCHET.read_text())["strict"]
    # one run over them all (their own errors only): a run of its own for each took a second or two apiece
    errors, report = _mypy("--strict", "--follow-imports=silent", *(str(ROOT / p) for p in strict))
    failing = sorted({p for p in strict for line in report.splitlines() if line.startswith(p) and ": error:" in line})
    assert errors == 0, f"{', '.join(failing)} passed mypy --strict and no longer do:\n{report}"
