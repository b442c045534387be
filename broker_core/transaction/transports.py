"""Check-back transports: how the broker asks a producer group about a half.

A transport implements ``CheckTransport.check(request) -> CheckAnswer``; it
raises ``CheckBackError`` (or anything else) when the call failed, which counts
as a check, or ``NoProducerOnlineError`` when it reached nobody (no producer of
the group online, nobody to ask), which is recorded but not counted. Built in:
``WebhookTransport`` (HTTP POST signed with HMAC-SHA256 of a per-group secret)
and ``CallableTransport`` (an in-process function).
Other transports (the gRPC endpoint's client checker) register a kind with
``register_transport_kind`` and are configured per group like webhooks.
"""

from __future__ import annotations

import abc
import base64
import hashlib
import hmac
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from broker_core.errors import (
    CheckBackError,
    CheckTimeoutError,
)
from broker_core.metadata import backup_path, temporary_name
from broker_core.transaction.types import CheckAnswer, TransactionResolution

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Broker-Signature"
TIMESTAMP_HEADER = "X-Broker-Timestamp"
MAX_ANSWER_BYTES = 64 * 1024
#: the longest a webhook check-back may wait (a group's ``timeout_s``): a
#: check that waits longer holds up the checker's round for nothing
MAX_WEBHOOK_TIMEOUT_S = 300.0
#: a webhook check-back's timeout when its group sets none (``timeout_s``)
WEBHOOK_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """What a check-back carries: the half's ids, topic, keys, properties and body.

    ``check_no`` is the number this check will have (1 for the first).
    """

    transaction_id: str
    msg_id: str
    producer_group: str
    topic: str
    queue_id: int
    tags: str | None
    keys: str | None
    properties: dict[str, str]
    body: bytes
    born_timestamp: int
    check_no: int
    half_offset: int
    queue_offset: int

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["body"] = base64.b64encode(self.body).decode()
        return d


class CheckTransport(abc.ABC):
    """One way of reaching a producer group's checker."""

    #: Short name recorded in each check's history ("webhook", "callable", "grpc").
    name: str = "transport"

    @property
    def target(self) -> str:
        """Where checks go (a URL, a function name), recorded in the history."""
        return "-"

    @abc.abstractmethod
    def check(self, request: CheckRequest) -> CheckAnswer:
        """Ask about one half; return the answer, or SENT for an asynchronous
        checker whose answer comes back through ``end_transaction(source=CHECK)``.
        Raise ``CheckBackError`` when there is no valid answer, its subclass
        ``NoProducerOnlineError`` when the check reached nobody."""


class SupportsCheck(Protocol):
    """What the registry accepts: a ``CheckTransport`` or any object shaped like one."""

    name: str

    @property
    def target(self) -> str: ...

    def check(self, request: CheckRequest) -> CheckAnswer: ...


def parse_answer(value: Any) -> CheckAnswer:
    """Return the ``CheckAnswer`` of a resolution value (``CheckBackError``)."""
    if isinstance(value, CheckAnswer):
        return value
    if value is None:
        return CheckAnswer.UNKNOWN
    try:
        res = TransactionResolution.coerce(value)
    except ValueError as exc:
        raise CheckBackError(f"invalid check answer {value!r}") from exc
    return CheckAnswer[res.name]


class CallableTransport(CheckTransport):
    """Calls ``fn(request)`` in the check thread; it returns COMMIT/ROLLBACK/UNKNOWN
    (enum or name) or None (UNKNOWN). An exception is a failed check."""

    name = "callable"

    def __init__(self, fn: Callable[[CheckRequest], Any]) -> None:
        self.fn = fn

    @property
    def target(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))

    def check(self, request: CheckRequest) -> CheckAnswer:
        return parse_answer(self.fn(request))


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """Return the signature header value: ``sha256=`` HMAC of ``timestamp.body``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify_signature(
    secret: str, timestamp: str, body: bytes, signature: str, max_skew_s: float = 300.0
) -> bool:
    """Check a webhook's signature and that its timestamp (ms) is recent."""
    try:
        ts = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs(time.time() * 1000 - ts) > max_skew_s * 1000:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), signature or "")


class WebhookTransport(CheckTransport):
    """POSTs the request as JSON; the reply must be JSON ``{"resolution": ...}``.

    Headers: ``X-Broker-Timestamp`` (ms) and ``X-Broker-Signature``
    (``sha256=`` + hex HMAC-SHA256 of ``timestamp + "." + body`` with the group's
    secret). A non-2xx status, a timeout, or a reply without a valid
    ``resolution`` (COMMIT, ROLLBACK, UNKNOWN) is a failed check.
    """

    name = "webhook"

    def __init__(
        self, url: str, secret: str, timeout_s: float = WEBHOOK_TIMEOUT_S
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError("webhook url must be http:// or https://")
        if not 0 < timeout_s <= MAX_WEBHOOK_TIMEOUT_S:  # (NaN fails it too)
            raise ValueError(
                f"webhook timeout_s must be above 0 and at most "
                f"{MAX_WEBHOOK_TIMEOUT_S:g} seconds, not {timeout_s!r}"
            )
        self.url = url
        self.secret = secret
        self.timeout_s = timeout_s

    @property
    def target(self) -> str:
        return self.url

    def check(self, request: CheckRequest) -> CheckAnswer:
        body = json.dumps(request.to_json(), separators=(",", ":")).encode()
        ts = str(int(time.time() * 1000))
        req = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                TIMESTAMP_HEADER: ts,
                SIGNATURE_HEADER: sign(self.secret, ts, body),
                "User-Agent": "rocketbroker-transaction-check/1",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise CheckBackError(f"HTTP {exc.code}") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                raise CheckTimeoutError(
                    f"timed out: no answer within {self.timeout_s:g} s"
                ) from exc
            raise CheckBackError(f"request failed: {reason}") from exc
        if len(raw) > MAX_ANSWER_BYTES:
            raise CheckBackError("answer too large")
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise CheckBackError("answer is not JSON") from exc
        if not isinstance(data, dict) or "resolution" not in data:
            raise CheckBackError("answer has no 'resolution'")
        if not isinstance(data["resolution"], str):
            raise CheckBackError("'resolution' is not a string")
        return parse_answer(data["resolution"])


def _parse_checkers(path: Path) -> dict[str, dict[str, Any]]:
    data = json.loads(path.read_bytes())
    groups = data.get("groups", {}) if isinstance(data, dict) else None
    if not isinstance(groups, dict) or not all(
        isinstance(v, dict) for v in groups.values()
    ):
        raise ValueError("not a checkers file ({'groups': {...}})")
    return groups


def read_checkers(path: Path) -> dict[str, dict[str, Any]]:
    """The producer groups' persisted checkers in ``path`` (empty if there is
    none), or its backup's when it is damaged; ``ConfigFileError`` naming
    the file when neither can be read (it raised a raw UnicodeDecodeError)."""
    from broker_core.errors import ConfigFileError

    try:
        return _parse_checkers(path)
    except FileNotFoundError:
        if not backup_path(path).exists():
            return {}
        why: Exception = FileNotFoundError(f"{path.name} is missing")
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        why = exc
    try:
        groups = _parse_checkers(backup_path(path))
    except (OSError, ValueError):
        raise ConfigFileError(
            f"{path} is damaged ({why}) and its backup cannot be read: restore "
            "it from a backup, or delete it and configure the producer groups' "
            "check-back webhooks again"
        ) from None
    log.warning("%s is damaged (%s): its backup is used", path, why)
    return groups


TransportFactory = Callable[[dict[str, Any]], CheckTransport]
_KINDS: dict[str, TransportFactory] = {}


def register_transport_kind(kind: str, factory: TransportFactory) -> None:
    """Let groups be configured with ``{"kind": kind, ...}`` (e.g. the gRPC checker)."""
    _KINDS[kind] = factory


def _webhook(cfg: dict[str, Any]) -> CheckTransport:
    timeout = float(cfg.get("timeout_s", WEBHOOK_TIMEOUT_S))
    return WebhookTransport(cfg["url"], cfg["secret"], timeout)


register_transport_kind("webhook", _webhook)


@dataclass(slots=True)
class _Loaded:
    mtime: float = -1.0
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)


class CheckerRegistry:
    """Which transport checks which producer group.

    A transport set with ``set_live`` (live producers) is tried before any of
    these. Transports set in this process with ``set_transport`` come first, then the
    persisted per-group configurations (``STORE/transaction/checkers.json``, shared
    by every process, e.g. set in the console and used by the Celery worker), then
    the process default. The file holds webhook secrets: keep the store private.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._loaded = _Loaded()
        self._runtime: dict[str, SupportsCheck] = {}
        self._default: SupportsCheck | None = None
        self._live: SupportsCheck | None = None
        self._built: dict[str, tuple[str, CheckTransport]] = {}

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return {}
        if mtime != self._loaded.mtime:
            groups = read_checkers(self.path)
            self._loaded = _Loaded(mtime, groups)
            self._built.clear()
        return self._loaded.groups

    def _save(self, groups: dict[str, dict[str, Any]]) -> None:
        # The backup first, then the file: one of the two is whole whatever
        # happens to the other.
        for target in (backup_path(self.path), self.path):
            tmp = temporary_name(target, "tmp")
            with tmp.open("w") as f:
                json.dump({"groups": groups}, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)

    def configure(self, producer_group: str, kind: str, **options: Any) -> None:
        """Persist the checker of ``producer_group`` (validated by building it once)."""
        if kind not in _KINDS:
            raise ValueError(f"unknown transport kind {kind!r} ({', '.join(_KINDS)})")
        cfg = {"kind": kind, **options}
        _KINDS[kind](cfg)
        with self._lock:
            groups = dict(self._load())
            groups[producer_group] = cfg
            self._save(groups)

    def remove(self, producer_group: str) -> None:
        """Forget the persisted and in-process checkers of ``producer_group``."""
        with self._lock:
            self._runtime.pop(producer_group, None)
            groups = dict(self._load())
            if groups.pop(producer_group, None) is not None:
                self._save(groups)

    def configured(self) -> dict[str, dict[str, Any]]:
        """Return the persisted configurations, secrets masked."""
        with self._lock:
            groups = self._load()
        return {
            g: {k: ("***" if k == "secret" else v) for k, v in cfg.items()}
            for g, cfg in groups.items()
        }

    def stored_transport(
        self, producer_group: str, skip: tuple[str | None, ...] = (None,)
    ) -> CheckTransport | None:
        """A new transport from ``producer_group``'s persisted configuration
        (None: none, unreadable, a kind in ``skip``, or a kind with no
        factory): what the endpoint falls back to when no producer is live."""
        try:
            with self._lock:
                cfg = self._load().get(producer_group)
        except Exception:  # noqa: BLE001 - an unreadable file: no fallback
            return None
        if not cfg or cfg.get("kind") in skip:
            return None
        factory = _KINDS.get(cfg["kind"])
        return factory(cfg) if factory else None

    def set_transport(self, producer_group: str, transport: SupportsCheck) -> None:
        """Use ``transport`` for ``producer_group`` in this process."""
        self._runtime[producer_group] = transport

    def set_default(self, transport: SupportsCheck | None) -> None:
        """Use ``transport`` for groups with no checker of their own (this process)."""
        self._default = transport

    def set_live(self, transport: SupportsCheck | None) -> None:
        """Try ``transport`` first for every group (this process): it reaches the
        group's live producers (the gRPC endpoint's relay). When it cannot
        deliver, the group's own checker is used (``chain_for``)."""
        self._live = transport

    @property
    def live(self) -> SupportsCheck | None:
        """The transport ``set_live`` set (None: none)."""
        return self._live

    def chain_for(self, producer_group: str) -> list[SupportsCheck]:
        """The transports to try in order: the live producers', then the group's."""
        own = self.for_group(producer_group)
        live = self._live
        if live is None:
            return [own] if own is not None else []
        if own is None or own is live or own.name == live.name:
            return [live]  # a group configured for the live kind: once
        return [live, own]

    def for_group(self, producer_group: str) -> SupportsCheck | None:
        """Return the transport of ``producer_group``, None if it has none."""
        runtime = self._runtime.get(producer_group)
        if runtime is not None:
            return runtime
        with self._lock:
            cfg = self._load().get(producer_group)
            if cfg is not None:
                key = json.dumps(cfg, sort_keys=True)
                hit = self._built.get(producer_group)
                if hit is None or hit[0] != key:
                    factory = _KINDS.get(cfg.get("kind", ""))
                    if factory is not None:
                        hit = (key, factory(cfg))
                        self._built[producer_group] = hit
                if hit is not None:
                    return hit[1]
        return self._default
