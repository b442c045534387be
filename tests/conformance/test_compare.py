"""The comparator itself: an explained difference pins what ours is, so a
regression of ours inside a field that differs from Apache is still caught
(before, an explanation accepted any value of ours: a lost committed message,
or namespaces delivering nothing, passed as "explained")."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compare import DIFFERENCES, compare  # noqa: E402

APACHE = json.loads((HERE / "apache-results.json").read_text())
LANGS = ["python", "node", "java", "go"]


def as_ours(**changes: dict) -> dict:
    """Apache's results as if they were ours, with ``changes`` made to one
    scenario's observation in every language: {scenario: {field: value}}."""
    ours = copy.deepcopy(APACHE)
    for lang in LANGS:
        results = ours["languages"][lang]["results"]
        for sid, fields in changes.items():
            results[sid]["status"] = "ok"
            results[sid].setdefault("observed", {}).update(fields)
    return ours


def verdicts(ours: dict, sid: str) -> set[str]:
    return {r["verdict"] for r in compare(APACHE, ours, LANGS) if r["scenario"] == sid}


def test_every_explanation_says_what_ours_is() -> None:
    for d in DIFFERENCES["differences"]:
        assert any(k in d for k in ("ours", "ours_in", "ours_range", "ours_status")), d


def test_ours_as_explained_passes() -> None:
    ours = as_ours(
        tx_commit={"received": 1, "checks": 0},
        namespace_isolation={
            "received": {"": ["ns-none"], "nsA": ["ns-nsA"], "nsB": ["ns-nsB"]}
        },
    )
    assert "DIFFERENT" not in verdicts(ours, "tx_commit")
    assert "DIFFERENT" not in verdicts(ours, "namespace_isolation")


@pytest.mark.parametrize(
    "sid, fields",
    [
        ("tx_commit", {"received": 0, "checks": 0}),  # the commit lost
        ("tx_check_commit", {"received": 0}),
        ("tx_check_unknown", {"received": 0}),
        ("tx_rollback", {"checks": 7}),
        ("namespace_isolation", {"received": {"": [], "nsA": [], "nsB": []}}),
        ("change_invisible", {"ack_ok": False}),
        ("fifo_redelivery", {"a_bodies": ["f1"]}),
        ("sql_filter_malformed", {"code": 40000, "side": "server"}),
    ],
)
def test_a_regression_inside_an_explained_field_is_caught(sid, fields) -> None:
    ours = as_ours(**{sid: fields})
    assert "DIFFERENT" in verdicts(ours, sid)


def test_a_scenario_apache_cannot_run_needs_ours_to_pass_on_its_own() -> None:
    good = as_ours(delay_timestamp={"received": 3, "lateness_ms": [700, 710, 720]})
    bad = as_ours(delay_timestamp={"received": 0, "lateness_ms": []})
    late = as_ours(delay_timestamp={"received": 3, "lateness_ms": [700, 9000, 720]})

    def python_verdict(ours: dict) -> str:
        (row,) = [
            r
            for r in compare(APACHE, ours, ["python"])
            if r["scenario"] == "delay_timestamp"
        ]
        return str(row["verdict"])

    # Apache could not run it with the Python client (D3).
    assert APACHE["languages"]["python"]["results"]["delay_timestamp"]["status"] != "ok"
    assert python_verdict(good).startswith("explained")
    assert python_verdict(bad) == "FAILED"
    assert python_verdict(late) == "FAILED"
