"""The one exception hierarchy of the broker core.

Expected outcomes (no new message, offset out of range, a flush timeout) are
returned as enum statuses in result dataclasses; these exceptions are faults
the caller must handle. Each class carries its own answers: ``code`` (the
console's JSON errors and logs), ``http_status`` (the console's API and the
node's admin API) and ``grpc_code`` (the RocketMQ 5 status code the gRPC
endpoint answers, ``RmqCode``); a subclass inherits what it does not change.
"""

from __future__ import annotations

from enum import IntEnum


class RmqCode(IntEnum):
    """RocketMQ 5's status codes (``apache.rocketmq.v2.Code``) the broker's
    errors map to."""

    BAD_REQUEST = 40000
    ILLEGAL_TOPIC = 40002
    ILLEGAL_CONSUMER_GROUP = 40003
    ILLEGAL_MESSAGE_TAG = 40004
    ILLEGAL_MESSAGE_KEY = 40005
    ILLEGAL_MESSAGE_GROUP = 40006
    ILLEGAL_MESSAGE_PROPERTY_KEY = 40007
    INVALID_TRANSACTION_ID = 40008
    ILLEGAL_MESSAGE_ID = 40009
    ILLEGAL_FILTER_EXPRESSION = 40010
    ILLEGAL_DELIVERY_TIME = 40012
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = 40014
    MESSAGE_CORRUPTED = 40016
    FORBIDDEN = 40300
    TOPIC_NOT_FOUND = 40402
    MESSAGE_BODY_TOO_LARGE = 41301
    MESSAGE_BODY_EMPTY = 41302
    MESSAGE_PROPERTIES_TOO_LARGE = 43101
    INTERNAL_ERROR = 50000
    INTERNAL_SERVER_ERROR = 50001


class BrokerError(Exception):
    """Base class of every error raised by ``broker_core``."""

    #: Short stable code, used by the console's JSON errors and by logs.
    code = "broker_error"
    #: The HTTP status that answers it (console API, node admin API).
    http_status = 500
    #: The RocketMQ 5 status code that answers it on the gRPC endpoint.
    grpc_code = RmqCode.INTERNAL_ERROR


class ValidationError(BrokerError):
    """Bad input from a caller: nothing was written."""

    code = "invalid"
    http_status = 400
    grpc_code = RmqCode.BAD_REQUEST


class InvalidArgumentError(ValidationError):
    """Arguments that do not fit an admin operation's signature: one missing,
    too many, an unknown keyword, or a value of a type its annotation does not
    allow (``cluster.argtypes``); the operation did not run."""

    code = "invalid_argument"


class InvalidTopicError(ValidationError):
    code = "invalid_topic"
    grpc_code = RmqCode.ILLEGAL_TOPIC


class InvalidGroupError(ValidationError):
    code = "invalid_group"
    grpc_code = RmqCode.ILLEGAL_CONSUMER_GROUP


class TopicNotAllowedError(ValidationError):
    """A system topic that clients may not send to."""

    code = "topic_forbidden"
    grpc_code = RmqCode.ILLEGAL_TOPIC


class MessageTooLargeError(ValidationError):
    code = "message_too_large"
    grpc_code = RmqCode.MESSAGE_BODY_TOO_LARGE


class PropertiesTooLargeError(MessageTooLargeError):
    """Tags, keys and properties together over the property limit."""

    code = "properties_too_large"
    grpc_code = RmqCode.MESSAGE_PROPERTIES_TOO_LARGE


class InvalidMessageError(ValidationError):
    code = "invalid_message"


class EmptyBodyError(InvalidMessageError):
    code = "empty_body"
    grpc_code = RmqCode.MESSAGE_BODY_EMPTY


class MessageCorruptedError(InvalidMessageError):
    """A body that does not decode as its declared encoding (bad gzip)."""

    code = "message_corrupted"
    grpc_code = RmqCode.MESSAGE_CORRUPTED


class IllegalPropertyError(InvalidMessageError):
    """A property name or value with a separator byte, or an empty name."""

    code = "illegal_property"
    grpc_code = RmqCode.ILLEGAL_MESSAGE_PROPERTY_KEY


class ReservedPropertyError(IllegalPropertyError):
    """A user property named like a RocketMQ system property."""

    code = "reserved_property"


class IllegalTagError(InvalidMessageError):
    code = "illegal_tag"
    grpc_code = RmqCode.ILLEGAL_MESSAGE_TAG


class IllegalKeyError(InvalidMessageError):
    code = "illegal_key"
    grpc_code = RmqCode.ILLEGAL_MESSAGE_KEY


class IllegalMessageIdError(InvalidMessageError):
    code = "illegal_message_id"
    grpc_code = RmqCode.ILLEGAL_MESSAGE_ID


class IllegalMessageGroupError(InvalidMessageError):
    code = "illegal_message_group"
    grpc_code = RmqCode.ILLEGAL_MESSAGE_GROUP


class InvalidQueueError(ValidationError):
    code = "invalid_queue"


class InvalidOffsetError(ValidationError):
    """A consumer offset that is negative or past the queue's end."""

    code = "invalid_offset"


class MessageTypeMismatchError(ValidationError):
    """A message of a type its topic was not made for (a FIFO, delayed or
    transactional message to a NORMAL topic, a plain one to a FIFO topic)."""

    code = "message_type_mismatch"
    grpc_code = RmqCode.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


class TopicNotFoundError(BrokerError):
    code = "topic_not_found"
    http_status = 404
    grpc_code = RmqCode.TOPIC_NOT_FOUND


class TopicNotWritableError(BrokerError):
    """A send to a topic whose permission has no write bit (``perm`` 4, read
    only: RocketMQ's ``NO_PERMISSION``, "sending message is forbidden")."""

    code = "topic_not_writable"
    http_status = 409  # the topic's own setting refuses it (not the caller's rights)
    grpc_code = RmqCode.FORBIDDEN


class TopicExistsError(BrokerError):
    code = "topic_exists"
    http_status = 409


class GroupNotConsumingError(BrokerError):
    """A consumer group that does not consume the topic on this node (no
    committed offset, no client subscribed): an offset reset for it is
    refused (a typo would otherwise create offsets for a group nobody runs)."""

    code = "group_not_consuming"
    http_status = 404
    grpc_code = RmqCode.ILLEGAL_CONSUMER_GROUP


class MessageNotFoundError(BrokerError):
    code = "message_not_found"
    http_status = 404


class StoreError(BrokerError):
    """The store on disk is unusable (corrupt beyond repair, locked, closed)."""

    code = "store_error"
    http_status = 503


class StoreClosedError(StoreError):
    code = "store_closed"


class CorruptRecordError(MessageNotFoundError, StoreError):
    """A record whose bytes fail their checks: it is not served."""

    code = "corrupt_record"
    http_status = 404  # as MessageNotFoundError: it is not served


class StorageFullError(StoreError):
    """The disk is full or above the store's usage limit: nothing was appended.

    Reads and consumption go on; appends resume once space is freed.
    """

    code = "storage_full"
    grpc_code = RmqCode.INTERNAL_SERVER_ERROR  # the client may retry later


class StorageIOError(StoreError):
    """The operating system failed a read or write (EIO and the like)."""

    code = "storage_io"
    grpc_code = RmqCode.INTERNAL_SERVER_ERROR


class AppendBusyError(StoreError):
    """A non-blocking append found the append lock held: nothing was appended.

    Only raised to a caller that asked not to wait (``blocking=False``); it
    then hands the append to a thread that may wait."""

    code = "append_busy"


class RepairRefusedError(StoreError):
    """``verify --repair`` would have made messages unreachable that were
    reachable before it: the files it rewrote were put back as they were."""

    code = "repair_refused"


class ConfigFileError(StoreError):
    """A configuration file is unreadable and has no usable backup."""

    code = "config_file"


class TransactionError(BrokerError):
    code = "transaction_error"
    http_status = 400


class UnknownTransactionError(TransactionError):
    code = "unknown_transaction"
    http_status = 404
    grpc_code = RmqCode.INVALID_TRANSACTION_ID


class TransactionConflictError(TransactionError):
    """A resolution that contradicts the half's recorded outcome."""

    code = "transaction_conflict"
    http_status = 409
    grpc_code = RmqCode.BAD_REQUEST


class WrongProducerGroupError(TransactionError):
    code = "wrong_producer_group"
    grpc_code = RmqCode.BAD_REQUEST


class IllegalTransactionOperationError(TransactionError):
    """RocketMQ's ILLEGAL_OPERATION (604): the half is left to the check."""

    code = "illegal_operation"


class DelayError(BrokerError):
    code = "delay_error"
    http_status = 400


class InvalidDelayError(DelayError, ValidationError):
    code = "invalid_delay"
    grpc_code = RmqCode.ILLEGAL_DELIVERY_TIME


class RecallError(DelayError):
    code = "recall_failed"
    http_status = 409  # delivered or recalled already


class UnknownScheduledMessageError(RecallError):
    """No scheduled message has the id (the others: delivered or recalled)."""

    code = "unknown_scheduled_message"
    http_status = 404


class FilterError(ValidationError):
    code = "filter_error"
    grpc_code = RmqCode.ILLEGAL_FILTER_EXPRESSION


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


class ControllerUnavailable(BrokerError):
    """No member of the controller's etcd cluster answered with a quorum
    (``cluster.controller``)."""

    code = "controller_unavailable"
    http_status = 503


class PromotionRefusedError(BrokerError):
    """A node was not made a master: it is one already, it is no cluster node,
    its master still heartbeats, or another promotion is under way."""

    code = "promotion_refused"
    http_status = 409


class RouteUnavailableError(BrokerError):
    """A node in a cluster that cannot reach the route registry and takes no
    writes: it has no route to answer with (the client keeps its own, or asks
    another node)."""

    code = "route_unavailable"
    http_status = 503
    grpc_code = RmqCode.INTERNAL_SERVER_ERROR


class CredentialsError(ValidationError):
    """``python -m broker_core credentials``: a host given wrongly, or a
    directory holding only half of a CA (``cluster.credentials``)."""

    code = "credentials"


class LeaseExpiredError(ReplicaReadOnlyError):
    """A master under a controller whose lease has run out (or was lost): it
    takes no appends until it leads again (``cluster.controller``); nothing
    was appended."""

    code = "lease_expired"
    grpc_code = RmqCode.INTERNAL_SERVER_ERROR  # the client retries elsewhere


class ReplicationError(StoreError):
    """Master/slave replication failed: a refused handshake, a chunk that does
    not fit the replica's log, or bytes that fail their checks (nothing of it
    was applied)."""

    code = "replication"


class StateTableDamagedError(StoreError):
    """An entry of the transaction state table fails its CRC: the table is
    derived from the log and is folded again when the service reopens."""

    code = "state_table_damaged"


class CheckBackError(TransactionError):
    """A check-back that produced no valid answer (network, bad reply); its
    ``failure`` is the kind recorded in the half's history."""

    code = "check_back_failed"
    failure = "error"


class CheckTimeoutError(CheckBackError):
    """A check-back that reached a producer or webhook which did not answer
    in time."""

    code = "check_back_timeout"
    failure = "timeout"


class NoProducerOnlineError(CheckBackError):
    """A check-back that reached nobody: no producer of the group is online.

    The check is recorded (failure ``no_producer``) but does not count against
    ``check_max``: only a check delivered to a producer does."""

    code = "no_producer_online"
    failure = "no_producer"


# -- signals between layers --------------------------------------------------
# Not faults of the broker's API (no ``code``/``http_status``/``grpc_code``):
# each is caught by the layer next to the one that raises it, which answers
# for it (a stale receipt handle, a busy pop state, an admin API status).


class InvalidHandle(Exception):
    """A receipt handle that is malformed, stale or unknown."""


class Busy(Exception):
    """Another process holds the pop state's write lock (``wait=False`` calls)."""


class CodecError(ValueError):
    """A value that cannot cross the admin API (an unknown tag or type)."""


class AdminError(Exception):
    """An answer other than 200: ``code`` is the HTTP status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class StaleMasterError(ValueError):
    """This store would be a second master of its name (``cluster.node``)."""
