"""Enums, settings and result values of the transaction service."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from broker_core.message import SendResult


class _NamedEnum(enum.Enum):
    """An enum whose members are also accepted by name (case-insensitive)."""

    @classmethod
    def coerce(cls, value: Any) -> Any:
        """Return the member for ``value`` (a member or its name), or ValueError."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            name = value.strip().upper()
            for candidate in (name, _ALIASES.get(name, name)):
                if candidate in cls.__members__:
                    return cls[candidate]
        names = ", ".join(m.name for m in cls)
        raise ValueError(f"{value!r} is not a {cls.__name__} ({names})")


# RocketMQ's ``LocalTransactionState`` names and the gRPC ``TransactionResolution``.
_ALIASES = {
    "COMMIT_MESSAGE": "COMMIT",
    "ROLLBACK_MESSAGE": "ROLLBACK",
    "UNKNOW": "UNKNOWN",
    "TRANSACTION_RESOLUTION_UNSPECIFIED": "UNKNOWN",
    "ROLLED_BACK": "ROLLBACK",
}


class TransactionResolution(_NamedEnum):
    """What a producer, a check-back answer or an operator decides for a half."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


class ResolutionSource(_NamedEnum):
    """Who resolved a half."""

    CLIENT = "CLIENT"
    CHECK = "CHECK"
    OPERATOR = "OPERATOR"


class TransactionState(_NamedEnum):
    """Where a half stands. COMMITTED and ROLLED_BACK are final."""

    PENDING = "PENDING"
    COMMITTED = "COMMITTED"
    ROLLED_BACK = "ROLLED_BACK"
    DISCARDED = "DISCARDED"

    @property
    def final(self) -> bool:
        return self in (TransactionState.COMMITTED, TransactionState.ROLLED_BACK)


class EndTransactionStatus(enum.Enum):
    """Outcome of ``end_transaction``: refusals are exceptions, not statuses."""

    #: This request recorded the outcome.
    RESOLVED = "RESOLVED"
    #: The same outcome was already recorded: nothing written (idempotent retry).
    ALREADY_RESOLVED = "ALREADY_RESOLVED"
    #: UNKNOWN: nothing recorded; the half stays pending and will be checked.
    UNCHANGED = "UNCHANGED"


class CheckAnswer(enum.Enum):
    """What a check-back produced."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"
    #: Delivered to an asynchronous checker; its answer comes as an
    #: ``end_transaction(..., source=CHECK)`` later (RocketMQ's one-way check).
    SENT = "SENT"
    #: No answer: error, timeout, malformed reply or no checker for the group.
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """Settings of the transaction service (RocketMQ ``BrokerConfig`` names).

    ``transaction_timeout_ms`` [transactionTimeOut]: minimum age before the first
    check, unless the half has ``CHECK_IMMUNITY_TIME_IN_SECONDS``.
    ``check_max`` [transactionCheckMax]: checks before a half is discarded (moved
    to ``TRANS_CHECK_MAX_TIME_TOPIC``) or, with ``rollback_on_max_checks``, rolled back.
    ``check_interval_ms`` [transactionCheckInterval]: at least this long between two
    checks of one half. ``file_reserved_hours`` [fileReservedTime]: older halves are
    not checked but discarded. ``check_threads``: check-backs in flight at once.
    ``run_time_budget_s``: default budget of one ``run_check``.
    """

    transaction_timeout_ms: int = 6000
    check_max: int = 15
    check_interval_ms: int = 60000
    file_reserved_hours: float = 72.0
    rollback_on_max_checks: bool = False
    check_threads: int = 8
    run_time_budget_s: float = 30.0

    def __post_init__(self) -> None:
        if self.transaction_timeout_ms < 0 or self.check_interval_ms < 0:
            raise ValueError("timeouts and intervals must not be negative")
        if not 1 <= self.check_max <= 250:
            raise ValueError("check_max must be within 1..250")
        if self.check_threads < 1:
            raise ValueError("check_threads must be at least 1")


@dataclass(slots=True)
class TransactionSendResult(SendResult):
    """``SendResult`` of a half; ``transaction_id`` names the half from then on."""

    transaction_id: str = ""


class EndTransactionRequest(NamedTuple):
    """One item of ``TransactionService.end_transactions``: the arguments of
    ``end_transaction``."""

    transaction_id: str
    producer_group: str | None
    resolution: TransactionResolution | str
    source: ResolutionSource | str = ResolutionSource.CLIENT
    operator: str | None = None
    msg_id: str | None = None
    queue_offset: int | None = None


@dataclass(frozen=True, slots=True)
class EndTransactionResult:
    """What ``end_transaction`` did and the half's outcome.

    ``state``/``source``/``operator`` describe the recorded outcome (the first one
    when ``status`` is ALREADY_RESOLVED). ``commit_offset_msg_id`` names the message
    written to the real topic by a commit.
    """

    transaction_id: str
    status: EndTransactionStatus
    state: TransactionState
    source: ResolutionSource | None = None
    operator: str | None = None
    commit_offset_msg_id: str | None = None


@dataclass(frozen=True, slots=True)
class HalfInfo:
    """One row of the pending-transaction index."""

    transaction_id: str
    msg_id: str | None
    half_offset: int
    queue_offset: int
    producer_group: str
    topic: str
    queue_id: int
    tags: str | None
    keys: str | None
    born_timestamp: int
    check_count: int
    last_check_at: int | None
    next_check_at: int
    state: TransactionState
    outcome_at: int | None = None
    outcome_source: ResolutionSource | None = None
    operator: str | None = None
    commit_offset_msg_id: str | None = None
    discard_reason: str | None = None


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """One step in a half's life: a check, an outcome, a discard or a resume.

    ``kind`` is CHECK, COMMIT, ROLLBACK, DISCARD or RESUME. For checks:
    ``transport``, ``target``, ``answer`` (a ``CheckAnswer`` name), ``latency_ms``,
    ``check_no`` and ``detail`` (the error of a failed check).
    """

    at: int
    kind: str
    source: str | None = None
    operator: str | None = None
    transport: str | None = None
    target: str | None = None
    answer: str | None = None
    latency_ms: float | None = None
    check_no: int | None = None
    detail: str | None = None
    log_offset: int = 0


@dataclass(frozen=True, slots=True)
class HalfDetail:
    """A half with its properties, body and full history."""

    info: HalfInfo
    properties: dict[str, str]
    body: bytes
    history: list[HistoryEvent]


@dataclass(frozen=True, slots=True)
class HalfPage:
    """One page of ``list_halves``; ``total`` is None when not counted.

    ``total_capped``: more than ``total`` halves match (counting stopped there).
    """

    items: list[HalfInfo]
    page: int
    page_size: int
    total: int | None
    total_capped: bool = False


class CheckRunStatus(enum.Enum):
    COMPLETED = "COMPLETED"  # every due half was handled
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"  # stopped at the budget; next run resumes
    BUSY = "BUSY"  # another run holds the check lock


@dataclass(slots=True)
class CheckRunResult:
    """Summary of one ``run_check``."""

    status: CheckRunStatus
    started_at: int = 0
    duration_s: float = 0.0
    indexed_records: int = 0
    scanned: int = 0
    checks_sent: int = 0
    answers: dict[str, int] = field(default_factory=dict)
    #: Of the FAILED answers: checks that reached nobody (no producer of the
    #: group online), recorded but not counted against ``check_max``.
    not_delivered: int = 0
    discarded: int = 0
    rolled_back: int = 0
    skipped_expired: int = 0
    errors: int = 0
    in_flight: int = 0
    resume_after: tuple[int, int] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 4),
            "indexed_records": self.indexed_records,
            "scanned": self.scanned,
            "checks_sent": self.checks_sent,
            "answers": dict(self.answers),
            "not_delivered": self.not_delivered,
            "discarded": self.discarded,
            "rolled_back": self.rolled_back,
            "skipped_expired": self.skipped_expired,
            "errors": self.errors,
            "in_flight": self.in_flight,
        }


@dataclass(frozen=True, slots=True)
class TransactionMetrics:
    """Counters since the index was built from the log, and current gauges.

    ``half_to_outcome_ms`` maps a bucket's upper bound (ms, -1 for +inf) to a count.
    """

    pending_by_topic: dict[str, int]
    pending: int
    discarded: int
    commits: int
    rollbacks: int
    discards: int
    resumes: int
    checks_sent: int
    checks_answered: int
    checks_failed: int
    #: Of the answered: what the checkers said (UNKNOWN keeps a half pending).
    checks_commit: int
    checks_rollback: int
    checks_unknown: int
    #: Of the failed: nobody to ask (no producer online: those checks do not
    #: count against ``check_max``), no answer in time, any other error.
    checks_no_producer: int
    checks_timeout: int
    checks_error: int
    half_to_outcome_ms: dict[int, int]
    half_to_outcome_count: int
    half_to_outcome_sum_ms: int
