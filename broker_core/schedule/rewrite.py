"""Rewriting on send: a ``DELAY`` level or a timer property parks a message.

RocketMQ 5 ``HookUtils.handleScheduleMessage``: a delay level moves
the message to ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``; a delivery time
(``TIMER_DELIVER_MS`` absolute, ``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS``
relative) moves it to ``rmq_sys_wheel_timer`` queue 0 with ``TIMER_OUT_MS``.
Both keep the real destination in ``REAL_TOPIC`` / ``REAL_QID``. A time
further ahead than the maximum (``timerMaxDelaySec``, 3 days by default) is
rejected (``InvalidDelayError``) as in RocketMQ; unlike RocketMQ, so are a level
and a time together and a negative delay, instead of being silently adjusted.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from broker_core.config import DEFAULT_TIMER_MAX_DELAY_S
from broker_core.errors import (
    InvalidDelayError,
    ReplicaReadOnlyError,
    TopicExistsError,
    TopicNotAllowedError,
)
from broker_core.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageInner,
)
from broker_core.validation import SCHEDULE_TOPIC, TIMER_TOPIC

if TYPE_CHECKING:
    from broker_core.broker import Broker

PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
#: On a delivered copy: which scheduled record it delivers ("L<level>:<queue
#: offset>" or "T:<queue offset>"); on a recall marker: which one it cancels.
#: It makes delivery progress derivable from the log after a crash.
PROPERTY_DELAY_SRC = "DELAY_SRC"

_INTERNAL_PROPERTIES = (
    PROPERTY_DELAY_SRC,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_DEL_UNIQKEY,
)
TIMER_PROPERTIES = (
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELAY_MS,
)
#: The default bound of timer delays: RocketMQ 5's ``timerMaxDelaySec`` (3
#: days, ``StoreConfig.timer_max_delay_s``), in ms.
DEFAULT_MAX_DELAY_MS = DEFAULT_TIMER_MAX_DELAY_S * 1000


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """What a message asks for: a level (clamped) or an absolute delivery time."""

    level: int = 0
    deliver_ms: int = 0

    @property
    def is_timer(self) -> bool:
        return self.deliver_ms > 0


def _int_property(props: dict[str, str], name: str) -> int | None:
    raw = props.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidDelayError(f"{name}={raw!r} is not an integer") from None


def parse_schedule(
    props: dict[str, str],
    now_ms: int,
    levels_ms: Sequence[int],
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
) -> ScheduleSpec | None:
    """Return what ``props`` schedule, or None for an immediate message.

    A level above the highest is clamped to it (RocketMQ); level 0 means none.
    Relative delays count from ``now_ms``; an absolute time at or before
    ``now_ms`` is an immediate message (RocketMQ 5). Raises ``InvalidDelayError``
    for a negative level or delay, a delay beyond ``max_delay_ms``, a level
    together with a time, or a value that is not an integer.
    """
    level = _int_property(props, PROPERTY_DELAY)
    sec = _int_property(props, PROPERTY_TIMER_DELAY_SEC)
    rel = _int_property(props, PROPERTY_TIMER_DELAY_MS)
    absolute = _int_property(props, PROPERTY_TIMER_DELIVER_MS)
    has_time = sec is not None or rel is not None or absolute is not None
    if level is not None and level < 0:
        raise InvalidDelayError(f"delay level {level} is negative")
    if level and has_time:
        raise InvalidDelayError("a delay level and a delivery time cannot be combined")
    if level:
        return ScheduleSpec(level=min(level, len(levels_ms)))
    if not has_time:
        return None
    # RocketMQ's precedence: TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS.
    if sec is not None:
        if sec < 0:
            raise InvalidDelayError(f"delay of {sec} s is negative")
        deliver = now_ms + sec * 1000
    elif rel is not None:
        if rel < 0:
            raise InvalidDelayError(f"delay of {rel} ms is negative")
        deliver = now_ms + rel
    else:
        assert absolute is not None
        if absolute < 0:
            raise InvalidDelayError(f"delivery time {absolute} is negative")
        deliver = absolute
    if deliver - now_ms > max_delay_ms:
        raise InvalidDelayError(
            f"the delivery time is {_span(deliver - now_ms)} ahead, beyond the "
            f"maximum delay of {_span(max_delay_ms)} ({max_delay_ms} ms)"
        )
    if deliver <= now_ms:
        return None
    return ScheduleSpec(deliver_ms=deliver)


def _span(ms: int) -> str:
    """``ms`` for a person: "3 days", "2.5 h", "90 s"."""
    for unit, size in (("days", 86_400_000), ("h", 3_600_000), ("min", 60_000)):
        if ms >= size:
            return f"{ms / size:.4g} {unit}"
    return f"{ms / 1000:.4g} s"


def rewrite_for_schedule(
    inner: MessageInner,
    now_ms: int,
    levels_ms: Sequence[int],
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
) -> MessageInner:
    """Return ``inner`` parked for later delivery, or unchanged if not scheduled.

    PREPARED and ROLLBACK records are left alone: a transactional message is
    scheduled when its commit is written (call this on the commit copy).
    Raises ``InvalidDelayError`` (see ``parse_schedule``).
    """
    tv = inner.sysflag & TRANSACTION_MASK
    if tv in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
        return inner
    if inner.topic in (SCHEDULE_TOPIC, TIMER_TOPIC):
        return inner
    props = inner.properties
    if not any(k in props for k in (PROPERTY_DELAY, *TIMER_PROPERTIES)):
        return inner
    spec = parse_schedule(props, now_ms, levels_ms, max_delay_ms)
    if spec is None:
        return inner
    props = dict(props)
    props[PROPERTY_REAL_TOPIC] = inner.topic
    props[PROPERTY_REAL_QID] = str(inner.queue_id)
    if spec.is_timer:
        props[PROPERTY_TIMER_OUT_MS] = str(spec.deliver_ms)
        return replace(inner, topic=TIMER_TOPIC, queue_id=0, properties=props)
    props[PROPERTY_DELAY] = str(spec.level)
    return replace(
        inner, topic=SCHEDULE_TOPIC, queue_id=spec.level - 1, properties=props
    )


def make_send_hook(
    levels_ms: Sequence[int], max_delay_ms: int = DEFAULT_MAX_DELAY_MS
) -> Callable[[MessageInner], MessageInner]:
    """Return a ``Broker.add_send_hook`` callable applying ``rewrite_for_schedule``."""
    levels = list(levels_ms)

    def hook(inner: MessageInner) -> MessageInner:
        if inner.topic == TIMER_TOPIC:
            raise TopicNotAllowedError(
                f"Sending message to topic[{TIMER_TOPIC}] is forbidden."
            )
        if any(k in inner.properties for k in _INTERNAL_PROPERTIES):
            # A client must not forge delivery bookkeeping (or resend a copy's).
            props = {
                k: v
                for k, v in inner.properties.items()
                if k not in _INTERNAL_PROPERTIES
            }
            inner = replace(inner, properties=props)
        return rewrite_for_schedule(
            inner, int(time.time() * 1000), levels, max_delay_ms
        )

    # The broker calls the hook only for messages it can concern: the timer
    # topic, or properties naming a schedule or internal property (a cheap
    # search of the encoded properties; a false positive only costs the hook).
    names = (*_INTERNAL_PROPERTIES, PROPERTY_DELAY, *TIMER_PROPERTIES)
    marker = re.compile(
        b"(?:%s)%s"
        % (
            b"|".join(re.escape(n.encode()) for n in names),
            NAME_VALUE_SEPARATOR.encode(),
        )
    ).search  # one C-level search instead of one per name

    def needs(topic: str, encoded_properties: bytes) -> bool:
        return topic == TIMER_TOPIC or marker(encoded_properties) is not None

    hook.needs = needs  # type: ignore[attr-defined]
    return hook


def schedule_properties(
    level: int | None = None,
    deliver_at_ms: int | None = None,
    delay_ms: int | None = None,
) -> dict[str, str]:
    """Return the properties that schedule a send; exactly one argument must be set.

    Raises ``InvalidDelayError`` when none or several are given or one is negative.
    """
    given = [
        (n, v)
        for n, v in (
            ("level", level),
            ("deliver_at_ms", deliver_at_ms),
            ("delay_ms", delay_ms),
        )
        if v is not None
    ]
    if len(given) != 1:
        raise InvalidDelayError("give exactly one of level, deliver_at_ms and delay_ms")
    name, value = given[0]
    if value < 0:
        raise InvalidDelayError(f"{name} {value} is negative")
    if name == "level":
        if value == 0:
            raise InvalidDelayError("delay level 0 schedules nothing")
        return {PROPERTY_DELAY: str(value)}
    if name == "deliver_at_ms":
        return {PROPERTY_TIMER_DELIVER_MS: str(value)}
    return {PROPERTY_TIMER_DELAY_MS: str(value)}


#: the name ``install_send_hook`` installs its hook under (once per broker)
HOOK_NAME = "schedule"


def install_send_hook(broker: Broker, max_delay_ms: int | None = None) -> None:
    """Make ``broker.send`` park scheduled messages; idempotent per broker.

    Every process that sends through a ``Broker`` (web, Celery, gRPC) calls this
    once after ``Broker.open``; ``DelayService`` does it by default. Timer
    delays beyond ``max_delay_ms`` (default: the store's ``timer_max_delay_s``)
    are refused with ``InvalidDelayError``.
    """
    if broker.has_send_hook(HOOK_NAME):
        return
    store = broker.store
    if store.topic_config(TIMER_TOPIC) is None:
        # Parked timers must have a topic even with auto_create_topic off.
        try:
            store.create_topic(TIMER_TOPIC, 1)
        except (TopicExistsError, ReplicaReadOnlyError):
            pass  # a slave: its master made it, the config sync brings it
    if max_delay_ms is None:
        max_delay_ms = store.config.timer_max_delay_s * 1000
    broker.add_send_hook(
        make_send_hook(store.config.delay_levels_ms, max_delay_ms), name=HOOK_NAME
    )
