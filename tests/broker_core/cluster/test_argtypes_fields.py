"""The fields inside a library dataclass argument (``Message``,
``MessageQuery``), which the codec builds from ``{"__t": ..., "f": {...}}``,
are checked against their own annotations before the operation runs, as the
arguments themselves are; and ``list_scheduled`` and ``configure_checker``
refuse values of the right type they cannot take. Each was a 500 (an
exception inside the store or the library), and a ``send`` of a bad message
auto-created its topic first; each is a 400 naming the argument (and the
field) now, over a real admin API server."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from broker_core import Message
from broker_core.cluster import argtypes, opscodec
from broker_core.errors import InvalidArgumentError
from broker_core.search import MessageQuery
from tests.broker_core.cluster.test_admin_api import TOKEN, call, ops
from tests.support import admin_of_store

M = "broker_core.message.Message"
Q = "broker_core.search.MessageQuery"


@pytest.fixture(scope="module")
def admin(tmp_path_factory):
    """The admin API of an endpoint in this process (its broker at hand, to
    see what a call stored), with the topic ``TA``."""
    with admin_of_store(tmp_path_factory.mktemp("fields") / "store", TOKEN) as srv:
        srv.ep.broker.create_topic("TA", 2)
        yield f"http://{srv.address}", srv.ep.broker


def _post(base: str, name: str, args: list[Any]) -> tuple[int, dict]:
    return call(base, "POST", f"/v1/ops/{name}", {"args": args})


def _message(topic: str, **fields: Any) -> dict[str, Any]:
    return {"__t": M, "f": {"topic": topic, "body": {"__b": "aGk="}, **fields}}


def _query(**fields: Any) -> dict[str, Any]:
    return {"__t": Q, "f": fields}


def _refused(base: str, name: str, args: list[Any], want: str) -> None:
    code, out = _post(base, name, args)
    assert code == 400, (name, args, code, out)
    assert want in out["error"], (name, args, out)
    assert out["broker_error"]["type"] == "InvalidArgumentError", out


def _no_fault(caplog) -> None:
    """Nothing failed inside the node (a 500 logs ``admin ops ... failed``)."""
    faults = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not faults, [r.getMessage() for r in faults]


def test_a_message_with_a_field_of_the_wrong_type_is_refused_and_not_sent(
    admin, caplog
):
    """A ``flag`` that is a string (a ``struct.error`` in the store's append,
    500, after the topic was auto-created), a ``queue_id`` that is a float
    or a string, a ``flag`` beyond 32 bits: 400 naming the argument and the
    field; the topic is not created and nothing is stored."""
    base, broker = admin
    refused = [
        ("TB2", {"flag": "x"},
         "message: field flag: must be int, not str (argument of send)"),
        ("TB3", {"queue_id": 1.5},
         "message: field queue_id: must be int | None, not float"),
        ("TB4", {"queue_id": "x"},
         "message: field queue_id: must be int | None, not str"),
        ("TB5", {"flag": True}, "message: field flag: must be int, not bool"),
        ("TB6", {"tags": 5}, "message: field tags: must be str | None, not int"),
        ("TB7", {"keys": ["k", 5]},
         "message: field keys: must be str | list[str] | None, not list"),
        ("TB8", {"properties": {"a": 1}},
         "message: field properties: must be dict[str, str] | None, not dict"),
        ("TB9", {"flag": 1 << 40}, "message: field flag: must be a 32-bit int"),
    ]  # fmt: skip
    log_end = broker.store.max_physical_offset()
    for topic, fields, want in refused:
        _refused(base, "send", [_message(topic, **fields)], want)
        assert broker.store.topic_config(topic) is None, topic
    code, out = _post(base, "send", [{"__t": M, "f": {"topic": "TB1", "body": "hi"}}])
    assert code == 400 and "message: field body: must be bytes, not str" in out["error"]
    assert broker.store.topic_config("TB1") is None
    assert broker.store.max_physical_offset() == log_end
    # Through ``RemoteNodeOps``, the console gets the library's error back.
    with pytest.raises(InvalidArgumentError, match="message: field flag: must be int"):
        ops(base).send(Message("TB2", b"hi", flag="x"))  # type: ignore[arg-type]
    assert broker.store.topic_config("TB2") is None
    # A message of the right types still goes (and makes its topic).
    code, out = _post(base, "send", [_message("TB2", flag=7, queue_id=1, keys=["k"])])
    assert code == 200, out
    assert broker.store.topic_config("TB2") is not None
    _no_fault(caplog)


def test_a_query_with_a_field_of_the_wrong_type_is_refused(admin, caplog):
    """``MessageQuery`` fields of the wrong type (each a 500 inside the
    search): 400 naming the argument and the field."""
    base, _broker = admin
    for fields, want in (
        ({"topic": "TA", "queue_id": "x"}, "query: field queue_id: must be int | None"),
        ({"topic": "TA", "begin_ms": "x"}, "query: field begin_ms: must be int | None"),
        ({"topic": ["TA"]}, "query: field topic: must be str | None, not list"),
        ({"topic": "TA", "tag": 5}, "query: field tag: must be str | None, not int"),
        ({"topic": "TA", "end_ms": 1.5}, "query: field end_ms: must be int | None"),
    ):
        _refused(base, "search_messages", [_query(**fields), 10, None, 100], want)
    with pytest.raises(InvalidArgumentError, match="query: field queue_id"):
        ops(base).search_messages(
            MessageQuery(topic="TA", queue_id="x"),  # type: ignore[arg-type]
            10,
            None,
            100,
        )
    code, out = _post(base, "search_messages", [_query(topic="TA"), 10, None, 100])
    assert code == 200, out
    _no_fault(caplog)


def test_list_scheduled_refuses_a_kind_or_numbers_it_cannot_take(admin, caplog):
    """A ``kind`` that is not "level" or "timer" (a ``ValueError`` building
    ``ScheduleKind``: 500) and negative numbers: 400 naming the argument."""
    base, _broker = admin
    for args, want in (
        (["bogus", 99, 10, -3], "kind: must be 'level' | 'timer' | None, not 'bogus'"),
        ([None, -1, 10, 0], "level: must be an int >= 0 | None, not -1"),
        ([None, None, -10, 0], "limit: must be an int >= 0, not -10"),
        (["level", None, 10, -3], "start: must be an int >= 0, not -3"),
    ):
        _refused(base, "list_scheduled", args, want)
    for args in (["level", 3, 10, 0], ["timer", None, 10, 0], [None, None, 5, 0]):
        code, out = _post(base, "list_scheduled", args)
        assert code == 200 and out["result"] == [], (args, out)
    _no_fault(caplog)


def test_configure_checker_refuses_a_url_or_timeout_it_cannot_use(admin, caplog):
    """A ``file://`` URL (the webhook's ``ValueError``: 500), one without a
    host, a timeout of no seconds: 400 naming the argument; nothing stored."""
    base, _broker = admin
    for args, want in (
        (["PID_f", "file:///etc/passwd", "s", 3],
         "url: must be an http:// or https:// URL with a host"),
        (["PID_f", "http:///check", "s", 3], "url: must be an http:// or https://"),
        (["PID_f", "http://127.0.0.1:1/check", "s", -3],
         "timeout_s: must be seconds above 0, at most 300, not -3"),
        (["PID_f", "http://127.0.0.1:1/check", "s", 0], "timeout_s: must be seconds"),
        (["PID_f", "http://127.0.0.1:1/check", "s", 1e308],
         "timeout_s: must be seconds above 0, at most 300"),
    ):  # fmt: skip
        _refused(base, "configure_checker", args, want)
    assert "PID_f" not in ops(base).checkers()
    code, out = _post(base, "configure_checker", ["PID_f", "https://h/c", "s", 2.5])
    assert code == 200, out
    assert ops(base).checkers()["PID_f"]["url"] == "https://h/c"
    _no_fault(caplog)


@dataclasses.dataclass
class _Inner:
    n: int
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Outer:
    name: str
    inner: _Inner | None = None
    many: list[_Inner] = dataclasses.field(default_factory=list)
    by_key: dict[str, _Inner] = dataclasses.field(default_factory=dict)


def test_fits_checks_dataclass_fields_recursively():
    """``argtypes.mismatch`` leads to the field that does not fit, through
    unions, lists and dicts; ``fits`` agrees."""
    good = _Outer("o", _Inner(1, ["a"]), [_Inner(2)], {"k": _Inner(3)})
    assert argtypes.mismatch(good, _Outer) is None and argtypes.fits(good, _Outer)
    cases = [
        (_Outer(5), ("name",), str),  # type: ignore[arg-type]
        (_Outer("o", _Inner("x")), ("inner", "n"), int),  # type: ignore[arg-type]
        (_Outer("o", _Inner(1, [2])), ("inner", "tags"), list[str]),  # type: ignore[list-item]
        (_Outer("o", many=[_Inner(1), _Inner(1.5)]), ("many", (1,), "n"), int),  # type: ignore[arg-type]
        (_Outer("o", by_key={"k": _Inner(True)}), ("by_key", ("k",), "n"), int),
    ]  # fmt: skip
    for value, path, hint in cases:
        miss = argtypes.mismatch(value, _Outer)
        assert miss is not None and miss[0] == path and miss[1] == hint, (value, miss)
        assert not argtypes.fits(value, _Outer)
    # Not an instance at all: the value itself, with the whole annotation.
    assert argtypes.mismatch(_Inner(1), _Outer | None) == ((), _Outer | None, _Inner(1))
    # A list member of the wrong type: the list (as before).
    assert argtypes.mismatch([1, "2"], list[int]) == ((), list[int], [1, "2"])

    def op(item: _Outer | None, items: list[_Outer]) -> None: ...

    with pytest.raises(InvalidArgumentError) as info:
        argtypes.check_call("op", op, [None, [good, _Outer("o", _Inner("x"))]], {})  # type: ignore[arg-type]
    assert str(info.value) == (
        "items: field [1].inner.n: must be int, not str (argument of op)"
    )


def test_every_codec_dataclass_has_field_annotations_the_check_can_read():
    """``argtypes`` resolves the fields of every dataclass the codec builds:
    one that does not resolve would fail every call that carries it."""
    for cls in opscodec._types().values():
        if dataclasses.is_dataclass(cls):
            names = [n for n, _h in argtypes.field_hints(cls)]
            assert names == [f.name for f in dataclasses.fields(cls)], cls
    hints = dict(argtypes.field_hints(Message))
    assert hints["flag"] is int and hints["body"] is bytes
