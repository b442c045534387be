"""What the admin API does to a node's store beyond halves and topics: read
messages, reset a consumer group's offsets, cancel a delayed message, list
the connected clients (``AdminServer`` routes the requests here).

Each operation calls the library function the console's single-node pages
call (``broker_core.search``, ``broker_core.browse``,
``broker_core.offset_reset``, ``DelayService.recall``,
``broker_core.clients``), so a node answers what its own console would show.
Bad input is an ``AdminError`` 400 whose message starts with the field's
name.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from broker_core import browse
from broker_core.clients import client_rows
from broker_core.errors import (
    AdminError,
    BrokerError,
    FilterSyntaxError,
    GroupNotConsumingError,
    InvalidOffsetError,
    InvalidQueueError,
    TopicNotFoundError,
    ValidationError,
)
from broker_core.search import MessageQuery
from broker_core.search import search_messages as core_search
from broker_core.validation import validate_group

log = logging.getLogger(__name__)

#: the field of a reset's body each refusal of ``NodeOps.apply_reset`` is about
_RESET_FIELDS: tuple[tuple[type[BrokerError], str], ...] = (
    (TopicNotFoundError, "topic"),
    (GroupNotConsumingError, "group"),
    (InvalidQueueError, "queue_id"),
    (InvalidOffsetError, "offset"),
)

#: Messages at most per ``GET /v1/messages``; with ``body=base64`` fewer, so
#: that one answer stays within a few times the largest message.
MESSAGES_MAX = 200
MESSAGES_MAX_BASE64 = 32
#: Whole bodies per answer at most (``body=base64``): later messages come
#: without ``body_base64`` and with ``body_omitted``, to be asked one by one.
BASE64_BUDGET_BYTES = 8 << 20
#: The largest ``preview_bytes`` (as the console's page shows at most).
PREVIEW_MAX = 64 * 1024
BODY_MODES = ("preview", "none", "base64")


def int_param(
    values: Mapping[str, Any],
    name: str,
    default: int | None = None,
    lo: int | None = None,
    hi: int | None = None,
) -> int | None:
    """Return ``values[name]`` as an integer within [lo, hi], ``default`` if
    absent or empty; ``AdminError`` 400 naming the field otherwise."""
    raw = values.get(name)
    if raw is None or raw == "":
        return default
    if isinstance(raw, bool):
        raise AdminError(400, f"{name}: an integer is required")
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise AdminError(400, f"{name}: an integer is required") from None
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f"{'' if lo is None else lo}..{'' if hi is None else hi}"
        raise AdminError(400, f"{name}: {value} is outside {bounds}")
    return value


def operator_of(body: Mapping[str, Any]) -> str:
    """Return the body's ``operator``; 400 when it is missing."""
    operator = body.get("operator")
    if not isinstance(operator, str) or not operator.strip():
        raise AdminError(400, "operator: who acts (a name) is required")
    return operator.strip()


class StoreOperations:
    """The store operations of the admin API over the endpoint ``ep``."""

    def __init__(self, ep: Any, node_ops: Any) -> None:
        self.ep = ep
        #: the console's operations (``NodeOps``): a write here is the same
        #: call as ``POST /v1/ops/<name>``
        self.node_ops = node_ops

    def _require_master(self, what: str) -> None:
        if not self.ep.writable():
            raise AdminError(503, f"this node is a slave: {what} on its master")

    # -- messages ------------------------------------------------------------
    def messages(self, query: Mapping[str, str]) -> dict[str, Any]:
        """``GET /v1/messages``: by ``msg_id``, by ``key`` (in ``topic`` or
        every topic), a page of ``topic``/``queue_id`` from ``offset``, or a
        scan of ``topic`` newest first; ``tag``, ``sql``, ``begin_ms``,
        ``end_ms`` and ``cursor`` as the console's search. ``body``:
        ``preview`` (``preview_bytes``, default 1 KiB), ``none`` or
        ``base64`` (the whole body besides the preview)."""
        mode = query.get("body") or "preview"
        if mode not in BODY_MODES:
            raise AdminError(400, f"body: one of {', '.join(BODY_MODES)}")
        most = MESSAGES_MAX_BASE64 if mode == "base64" else MESSAGES_MAX
        limit = int_param(query, "limit", 20, 1, most)
        preview = int_param(
            query, "preview_bytes", browse.PREVIEW_BYTES, 0, PREVIEW_MAX
        )
        assert limit is not None and preview is not None
        if mode == "none":
            preview = 0
        topic = (query.get("topic") or "").strip()
        msg_id = (query.get("msg_id") or "").strip()
        key = (query.get("key") or "").strip()
        queue_id = int_param(query, "queue_id", None, 0)
        offset = int_param(query, "offset", None, 0)
        out: dict[str, Any]
        try:
            if offset is not None and not (msg_id or key):
                out = self._browse(topic, queue_id, offset, limit)
            else:
                out = self._search(query, topic, msg_id, key, queue_id, limit)
        except TopicNotFoundError as exc:
            raise AdminError(404, f"topic: {exc}") from exc
        except InvalidQueueError as exc:
            raise AdminError(400, f"queue_id: {exc}") from exc
        except FilterSyntaxError as exc:
            raise AdminError(400, f"sql: {exc}") from exc
        except ValidationError as exc:
            raise AdminError(400, str(exc)) from exc
        if msg_id and not out["found"]:
            raise AdminError(404, f"msg_id: no message {msg_id!r} on this node")
        found = out.pop("found")
        out["messages"] = []
        budget = BASE64_BUDGET_BYTES
        for m in found:
            whole = mode == "base64" and (len(m.body) <= budget or not out["messages"])
            row = browse.message_json(m, preview, whole)
            if whole:
                budget -= len(m.body)
            elif mode == "base64":
                row["body_omitted"] = (
                    f"the answer's bodies reached {BASE64_BUDGET_BYTES} bytes: "
                    "ask for this message by msg_id"
                )
            out["messages"].append(row)
        return out

    def _browse(
        self, topic: str, queue_id: int | None, offset: int, limit: int
    ) -> dict[str, Any]:
        if not topic:
            raise AdminError(400, "topic: required with offset")
        if queue_id is None:
            raise AdminError(400, "queue_id: required with offset")
        page = browse.browse_queue(self.ep.store, topic, queue_id, offset, None, limit)
        return {
            "found": page.messages,
            "min_offset": page.min_offset,
            "max_offset": page.max_offset,
            "start": page.start,
            "next_offset": page.next_start,
        }

    def _search(
        self,
        query: Mapping[str, str],
        topic: str,
        msg_id: str,
        key: str,
        queue_id: int | None,
        limit: int,
    ) -> dict[str, Any]:
        if not (topic or msg_id or key):
            raise AdminError(400, "topic: give a topic, a key or a msg_id")
        q = MessageQuery(
            topic=topic or None,
            msg_id=msg_id or None,
            key=key or None,
            queue_id=queue_id,
            begin_ms=int_param(query, "begin_ms"),
            end_ms=int_param(query, "end_ms"),
            tag=(query.get("tag") or "").strip() or None,
            sql=(query.get("sql") or "").strip() or None,
        )
        page = core_search(
            self.ep.broker,
            q,
            limit,
            query.get("cursor") or None,
            browse.SEARCH_SCAN_BUDGET,
        )
        return {
            "found": page.messages,
            "cursor": page.cursor,
            "scanned": page.scanned,
            "errors": page.errors,
        }

    # -- consumer offsets ----------------------------------------------------
    def reset(self, group: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /v1/consumers/<group>/reset`` with ``operator``, ``topic``,
        ``timestamp`` (ms) or ``offset``, optional ``queue_id`` and
        ``reason``: move the group's committed offsets as the console's
        consumer page does (``broker_core.offset_reset``)."""
        self._require_master("reset offsets")
        operator = operator_of(body)
        try:
            validate_group(group)
        except ValidationError as exc:
            raise AdminError(400, f"group: {exc}") from exc
        topic = body.get("topic")
        if not isinstance(topic, str) or not topic:
            raise AdminError(400, "topic: required")
        to_ms = int_param(body, "timestamp", None, 0)
        to_offset = int_param(body, "offset", None, 0)
        if (to_ms is None) == (to_offset is None):
            raise AdminError(400, "timestamp, offset: give exactly one")
        queue_id = int_param(body, "queue_id", None, 0)
        try:
            changes = self.node_ops.apply_reset(
                group, topic, to_offset, to_ms, queue_id
            )
        except BrokerError as exc:  # no topic or group here (404), bad offset
            # The body's field at fault first, as this API's other refusals.
            field = next(
                (f for cls, f in _RESET_FIELDS if isinstance(exc, cls)), "reset"
            )
            raise AdminError(exc.http_status, f"{field}: {exc}") from exc
        log.info(
            "admin: %s reset %s on %s to %s (%s)",
            operator,
            group,
            topic,
            {c.queue_id: c.target for c in changes},
            body.get("reason") or "no reason given",
        )
        return {
            "group": group,
            "topic": topic,
            "operator": operator,
            "changes": [c.as_json() for c in changes],
        }

    # -- delays ----------------------------------------------------------------
    def cancel_delayed(self, msg_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /v1/delays/<id>/cancel`` with ``operator`` (and ``reason``):
        recall a scheduled message before it is delivered
        (``DelayService.recall``, as the console's delay page)."""
        self._require_master("cancel delayed messages")
        operator = operator_of(body)
        try:
            result = self.node_ops.recall(msg_id)
        except BrokerError as exc:  # unknown (404), delivered or recalled (409)
            raise AdminError(exc.http_status, str(exc)) from exc
        log.info(
            "admin: %s cancelled delayed message %s (%s)",
            operator,
            msg_id,
            body.get("reason") or "no reason given",
        )
        return asdict(result) | {"kind": result.kind.value, "operator": operator}

    # -- clients ---------------------------------------------------------------
    def clients(self, query: Mapping[str, str]) -> dict[str, Any]:
        """``GET /v1/clients?group=``: the clients the endpoint knows (online
        or remembered), only those of ``group`` if given."""
        # The endpoint's client table belongs to its event loop: copy it once
        # (one C-level call) rather than iterate it from this thread.
        raw = self.ep.client_rows()
        return {"clients": client_rows(raw, query.get("group") or None)}
