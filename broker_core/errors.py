"""The one exception hierarchy of the broker core.

Expected outcomes (no new message, offset out of range, a flush timeout) are
returned as enum statuses in result dataclasses; these exceptions are faults
the caller must handle. The console maps them to HTTP answers in one place, and
the gRPC endpoint to RocketMQ status codes.
"""

from __future__ import annotations


class BrokerError(Exception):
    """Base class of every error raised by ``broker_core``."""

    #: Short stable code, used by the console's JSON errors and by logs.
    code = "broker_error"


class ValidationError(BrokerError):
    """Bad input from a caller: nothing was written."""

    code = "invalid"


class InvalidTopicError(ValidationError):
    code = "invalid_topic"


class InvalidGroupError(ValidationError):
    code = "invalid_group"


class TopicNotAllowedError(ValidationError):
    """A system topic that clients may not send to."""

    code = "topic_forbidden"


class MessageTooLargeError(ValidationError):
    code = "message_too_large"


class InvalidMessageError(ValidationError):
    code = "invalid_message"


class MessageCorruptedError(InvalidMessageError):
    """A body that does not decode as its declared encoding (bad gzip)."""

    code = "message_corrupted"


class IllegalPropertyError(InvalidMessageError):
    """A property name or value with a separator byte, or an empty name."""

    code = "illegal_property"


class ReservedPropertyError(IllegalPropertyError):
    """A user property named like a RocketMQ system property."""

    code = "reserved_property"


class IllegalTagError(InvalidMessageError):
    code = "illegal_tag"


class IllegalKeyError(InvalidMessageError):
    code = "illegal_key"


class IllegalMessageIdError(InvalidMessageError):
    code = "illegal_message_id"


class IllegalMessageGroupError(InvalidMessageError):
    code = "illegal_message_group"


class InvalidQueueError(ValidationError):
    code = "invalid_queue"


class InvalidOffsetError(ValidationError):
    """A consumer offset that is negative or past the queue's end."""

    code = "invalid_offset"


class MessageTypeMismatchError(ValidationError):
    """A message of a type its topic was not made for (a FIFO, delayed or
    transactional message to a NORMAL topic, a plain one to a FIFO topic)."""

    code = "message_type_mismatch"


class TopicNotFoundError(BrokerError):
    code = "topic_not_found"


class TopicExistsError(BrokerError):
    code = "topic_exists"


class MessageNotFoundError(BrokerError):
    code = "message_not_found"


class StoreError(BrokerError):
    """The store on disk is unusable (corrupt beyond repair, locked, closed)."""

    code = "store_error"


class StoreClosedError(StoreError):
    code = "store_closed"


class CorruptRecordError(MessageNotFoundError, StoreError):
    """A record whose bytes fail their checks: it is not served."""

    code = "corrupt_record"


class StorageFullError(StoreError):
    """The disk is full or above the store's usage limit: nothing was appended.

    Reads and consumption go on; appends resume once space is freed.
    """

    code = "storage_full"


class StorageIOError(StoreError):
    """The operating system failed a read or write (EIO and the like)."""

    code = "storage_io"


class AppendBusyError(StoreError):
    """A non-blocking append found the append lock held: nothing was appended.

    Only raised to a caller that asked not to wait (``blocking=False``); it
    then hands the append to a thread that may wait."""

    code = "append_busy"


class ConfigFileError(StoreError):
    """A configuration file is unreadable and has no usable backup."""

    code = "config_file"


class TransactionError(BrokerError):
    code = "transaction_error"


class UnknownTransactionError(TransactionError):
    code = "unknown_transaction"


class TransactionConflictError(TransactionError):
    """A resolution that contradicts the half's recorded outcome."""

    code = "transaction_conflict"


class WrongProducerGroupError(TransactionError):
    code = "wrong_producer_group"


class IllegalTransactionOperationError(TransactionError):
    """RocketMQ's ILLEGAL_OPERATION (604): the half is left to the check."""

    code = "illegal_operation"


class DelayError(BrokerError):
    code = "delay_error"


class InvalidDelayError(DelayError, ValidationError):
    code = "invalid_delay"


class RecallError(DelayError):
    code = "recall_failed"


class UnknownScheduledMessageError(RecallError):
    """No scheduled message has the id (the others: delivered or recalled)."""

    code = "unknown_scheduled_message"


class FilterError(ValidationError):
    code = "filter_error"


class FilterSyntaxError(FilterError):
    """An SQL92 expression that does not parse; carries the position."""

    code = "filter_syntax"

    def __init__(self, message: str, position: int = -1, expected: str = "") -> None:
        super().__init__(message)
        self.position = position
        self.expected = expected


class FilterEvaluationError(FilterError):
    code = "filter_evaluation"


class ReplicaReadOnlyError(StoreError):
    """The store is a slave following a master: it takes no client appends
    until it is promoted (nothing was appended)."""

    code = "replica_read_only"


class ReplicationError(StoreError):
    """Master/slave replication failed: a refused handshake, a chunk that does
    not fit the replica's log, or bytes that fail their checks (nothing of it
    was applied)."""

    code = "replication"
