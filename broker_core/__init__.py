"""The broker library: commit log, consume queues, indexes, transactions,
delayed delivery, filters and the RocketMQ 5 gRPC endpoint.

It imports no Django, Celery or PySpark: adapters to those live in ``console``.
"""

#: this broker's version (``pyproject.toml`` says the same; a test checks it)
__version__ = "0.1.0"

from broker_core.broker import Broker, SendHook
from broker_core.dispatch import DispatchRequest
from broker_core.message import (
    Message,
    MessageExt,
    MessageInner,
    PullResult,
    PullStatus,
    PutResult,
    SendResult,
    SendStatus,
)
from broker_core.record import decode_buffer
from broker_core.store import MessageStore
from broker_core.transaction import (
    ResolutionSource,
    TransactionResolution,
    TransactionService,
    TransactionState,
)

__all__ = [
    "Broker",
    "DispatchRequest",
    "Message",
    "MessageExt",
    "MessageInner",
    "MessageStore",
    "PullResult",
    "PullStatus",
    "PutResult",
    "ResolutionSource",
    "SendHook",
    "SendResult",
    "SendStatus",
    "TransactionResolution",
    "TransactionService",
    "TransactionState",
    "decode_buffer",
]
