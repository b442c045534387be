"""Check-backs from another process (the Celery check task) to the gRPC endpoint
through Redis.

Worker side: importing this module registers the transport kind ``grpc``
(``checkers.configure(group, "grpc", redis_url=..., channel=...)`` or list this
module in ``TRANSACTION_TRANSPORT_MODULES``, whose ``install()`` puts it
before every group's own checker). ``check()`` publishes the ``CheckRequest`` as JSON on
the channel and waits (``timeout_s``) on a one-off reply list for the endpoint's
answer: ``sent <client id>`` -> ``SENT`` (the producer's answer comes back as
EndTransaction source CHECK). Every endpoint on the channel answers, ``none:
<why>`` when it has no live producer for the half, ``error: <why>`` when the
sending failed. When no endpoint is subscribed, or every one answered
``none``, the check reached nobody: ``check()`` raises
``NoProducerOnlineError`` (recorded, not counted against the maximum checks).
When an endpoint failed or some did not answer in time it raises
``CheckBackError`` (a FAILED check, counted: it may have been delivered).
Installed with ``install()`` as the registry's live transport, the group's own
checker (its webhook) is asked next either way.

Endpoint side: ``RelayListener(endpoint, redis_url, channel)`` subscribes and
forwards each request on a live producer's Telemetry stream.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
import uuid
from typing import Any

from broker_core.transaction import (
    CheckAnswer,
    CheckBackError,
    CheckRequest,
    CheckTimeoutError,
    CheckTransport,
    NoProducerOnlineError,
    register_transport_kind,
)

log = logging.getLogger("broker_core.endpoint.relay")
DEFAULT_CHANNEL = "broker_core:grpc:check"
#: The listener's wait before subscribing again, doubling up to the maximum.
RECONNECT_MIN_S = 0.25
RECONNECT_MAX_S = 4.0


def default_url() -> str:
    return os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


class RedisRelayTransport(CheckTransport):
    name = "grpc"

    def __init__(
        self,
        redis_url: str | None = None,
        channel: str = DEFAULT_CHANNEL,
        timeout_s: float = 2.0,
    ) -> None:
        import redis

        self.url = redis_url or default_url()
        self.channel = channel
        self.timeout_s = timeout_s
        self.redis = redis.Redis.from_url(self.url)
        # Check threads share the transport: each records its own producer.
        self._local = threading.local()

    @property
    def target(self) -> str:
        return getattr(self._local, "target", None) or f"redis:{self.channel}"

    def check(self, request: CheckRequest) -> CheckAnswer:
        self._local.target = None
        reply = f"{self.channel}:reply:{uuid.uuid4().hex}"
        payload = json.dumps({"reply": reply, "request": request.to_json()})
        deadline = time.monotonic() + self.timeout_s
        refusals: list[str] = []
        endpoints = 0
        try:
            # Every endpoint subscribed answers: "sent <client>", "none: ..."
            # or "error: ...".
            endpoints = self.redis.publish(self.channel, payload)
            if endpoints == 0:
                raise NoProducerOnlineError("no gRPC endpoint subscribed")
            while len(refusals) < endpoints:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                got = self.redis.blpop([reply], timeout=max(left, 0.01))
                if got is None:
                    break
                raw = got[1]
                answer = raw.decode() if isinstance(raw, bytes) else str(raw)
                if answer.startswith("sent "):
                    self._local.target = answer[5:]
                    return CheckAnswer.SENT
                refusals.append(answer)
        except CheckBackError:
            raise
        except Exception as exc:  # noqa: BLE001 - redis down etc.
            if endpoints == 0:
                # Not even published: the check reached nobody.
                raise NoProducerOnlineError(f"redis relay unreachable: {exc}") from exc
            raise CheckBackError(f"redis relay failed: {exc}") from exc
        finally:
            try:
                self.redis.delete(reply)
            except Exception:  # noqa: BLE001 - best effort
                pass
        errors = [r for r in refusals if not r.startswith("none")]
        if errors:
            raise CheckBackError(f"gRPC endpoint: {errors[0]}")
        if len(refusals) < endpoints:
            raise CheckTimeoutError(
                f"gRPC endpoint: {endpoints - len(refusals)} of {endpoints} "
                f"timed out ({self.timeout_s:g} s)"
            )
        raise NoProducerOnlineError(f"gRPC endpoint: {refusals[0]}")


def _factory(cfg: dict[str, Any]) -> CheckTransport:
    return RedisRelayTransport(
        cfg.get("redis_url"),
        cfg.get("channel", DEFAULT_CHANNEL),
        float(cfg.get("timeout_s", 2.0)),
    )


register_transport_kind("grpc", _factory)


def install(
    service: Any, redis_url: str | None = None, channel: str = DEFAULT_CHANNEL
) -> None:
    """Try the live producers behind the gRPC endpoint first for every group,
    then the group's own checker (its webhook); what the Celery check does
    for each module of ``TRANSACTION_TRANSPORT_MODULES`` with an ``install``."""
    current = service.checkers.live
    if (
        isinstance(current, RedisRelayTransport)
        and current.url == (redis_url or default_url())
        and current.channel == channel
    ):
        return
    service.checkers.set_live(RedisRelayTransport(redis_url, channel))


def request_from_json(d: dict[str, Any]) -> CheckRequest:
    d = dict(d)
    d["body"] = base64.b64decode(d["body"])
    return CheckRequest(**d)


class RelayListener:
    """Endpoint side: forwards relayed check requests to live producers."""

    def __init__(
        self, endpoint: Any, redis_url: str | None, channel: str = DEFAULT_CHANNEL
    ):
        import redis

        self.endpoint = endpoint
        self.redis = redis.Redis.from_url(
            redis_url or default_url(), health_check_interval=5
        )
        self.channel = channel
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="grpc-relay")

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        # Subscribed again within a second of Redis coming back: while no
        # endpoint listens, a check reaches nobody (not counted, but the half
        # waits a whole check interval more). A frozen Redis is noticed by the
        # connection's health check.
        backoff = RECONNECT_MIN_S
        while not self.stop.is_set():
            ps = None
            try:
                ps = self.redis.pubsub(ignore_subscribe_messages=True)
                ps.subscribe(self.channel)
                if backoff > RECONNECT_MIN_S:
                    log.info("relay listener subscribed again to %s", self.channel)
                backoff = RECONNECT_MIN_S
                while not self.stop.is_set():
                    m = ps.get_message(timeout=0.5)
                    if m is None:
                        continue
                    self._handle(m["data"])
            except Exception as exc:  # noqa: BLE001 - reconnect
                if backoff == RECONNECT_MIN_S:
                    log.warning("relay listener: %s; subscribing again", exc)
                self.stop.wait(backoff)
                backoff = min(RECONNECT_MAX_S, backoff * 2)
            finally:
                if ps is not None:
                    try:
                        ps.close()
                    except Exception:  # noqa: BLE001 - the connection is gone
                        pass

    def _handle(self, data: bytes) -> None:
        try:
            d = json.loads(data)
            req = request_from_json(d["request"])
        except Exception:  # noqa: BLE001
            log.warning("malformed relayed check request")
            return
        try:
            target = self.endpoint.transactions.deliver_check(req)
            answer = f"sent {target}"
        except NoProducerOnlineError as exc:
            # Another endpoint subscribed to the channel may have the producer:
            # the worker waits for every endpoint's answer.
            answer = f"none: {exc}"
        except Exception as exc:  # noqa: BLE001
            log.warning("relayed check failed: %s", exc)
            answer = f"error: {type(exc).__name__}: {exc}"
        try:
            self.redis.rpush(d["reply"], answer)
            self.redis.expire(d["reply"], 30)
        except Exception:  # noqa: BLE001
            log.exception("relay reply failed")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=3)
