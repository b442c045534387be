"""EndTransaction and check-backs to live producers."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_core.endpoint.wire import (
    SYSTEM_PROPS,
    C,
    body_digest,
    client_id_of,
    error_code,
    status,
    ts_ms,
)
from broker_core.transaction import CheckTransport

if TYPE_CHECKING:
    import asyncio

    from broker_core.endpoint.clients import ClientTable
    from broker_core.endpoint.guard import WriteGuard
    from broker_core.endpoint.threads import Threads
    from broker_core.endpoint.waits import PollWaits
    from broker_core.transaction import TransactionService

log = logging.getLogger("broker_core.endpoint")


class Transactions:
    """EndTransaction and check-backs to live producers."""

    def __init__(
        self,
        *,
        tx: TransactionService,
        clients: ClientTable,
        guard: WriteGuard,
        threads: Threads,
        waits: PollWaits,
        counters: dict[str, int],
    ) -> None:
        self.tx = tx
        self.clients = clients
        self.guard = guard
        self.threads = threads
        self.waits = waits
        self.counters = counters
        #: the event loop the Telemetry streams are served on (set when the
        #: endpoint starts): check-backs are queued onto it from other threads
        self.loop: asyncio.AbstractEventLoop | None = None
        #: the relay to producers on the other workers or nodes of this
        #: broker name (``relay.RedisRelayTransport``; None: alone)
        self.peers: Any = None
        self.tx_client: dict[str, str] = {}  # transaction id -> client id
        #: Check-backs sent: transaction id -> (monotonic time, client id).
        self.checks_out: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._checker_groups: set[str] = set()

    def remember_sender(self, transaction_id: str, client_id: str) -> None:
        """The client that sent a half: its check-backs go to it first."""
        self.tx_client[transaction_id] = client_id
        if len(self.tx_client) > 100_000:
            self.tx_client.pop(next(iter(self.tx_client)))

    def ensure_checker(self, group: str) -> None:
        """Persist kind "grpc" for a producer group with no checker, so the
        Celery check (which imports broker_core.endpoint.relay through
        TRANSACTION_TRANSPORT_MODULES) relays its check-backs here."""
        if group in self._checker_groups:
            return
        self._checker_groups.add(group)
        # In this process: live producers first, then the group's own
        # configured checker (e.g. its webhook).
        self.tx.checkers.set_transport(group, GrpcCheckTransport(self, group))
        try:
            if group not in self.tx.checkers.configured():
                self.tx.checkers.configure(group, "grpc")
        except Exception:  # noqa: BLE001 - best effort
            log.warning("could not configure the grpc checker for %s", group)

    async def EndTransaction(self, request, context):  # noqa: N802
        from broker_core.transaction import TransactionResolution

        tid = request.transaction_id
        if not tid:
            return spb.EndTransactionResponse(
                status=status(C.INVALID_TRANSACTION_ID, "transaction id is empty")
            )
        if (refused := self.guard.refusal()) is not None:
            return spb.EndTransactionResponse(status=refused)
        if request.resolution not in pb.TransactionResolution.values():
            return spb.EndTransactionResponse(
                status=status(
                    C.BAD_REQUEST,
                    f"unknown transaction resolution {request.resolution}",
                )
            )
        res = {
            pb.COMMIT: TransactionResolution.COMMIT,
            pb.ROLLBACK: TransactionResolution.ROLLBACK,
        }.get(request.resolution, TransactionResolution.UNKNOWN)
        source = "CHECK" if request.source == pb.SOURCE_SERVER_CHECK else "CLIENT"
        if source == "CHECK":
            # The checker's answer, whatever it is (UNKNOWN included), goes in
            # the half's history with its latency.
            sent = self.checks_out.pop(tid, None)
            latency = None if sent is None else (time.monotonic() - sent[0]) * 1000
            try:
                await self.threads.on_writer(
                    self.tx.record_check_answer,
                    tid,
                    res.value,
                    client_id_of(context) or (sent[1] if sent else ""),
                    latency,
                )
            except Exception:  # noqa: BLE001 - the outcome below matters more
                log.warning("could not record the check answer for %s", tid)
        try:
            await self.threads.on_writer(
                self.tx.end_transaction, tid, request.topic.name, res, source
            )
        except Exception as exc:  # noqa: BLE001
            code = error_code(exc)
            if code == C.INTERNAL_ERROR:
                log.exception("end transaction failed")
            return spb.EndTransactionResponse(status=status(code, str(exc)))
        self.tx_client.pop(tid, None)
        if res is TransactionResolution.COMMIT:
            self.waits.wake(request.topic.name)
        if res is not TransactionResolution.UNKNOWN:
            # SYNC_MASTER: the outcome is answered once a slave has it (were
            # this master lost first, the half is checked back on the new one).
            why = await self.guard.unreplicated()
            if why is not None:
                return spb.EndTransactionResponse(
                    status=status(C.SLAVE_PERSISTENCE_TIMEOUT, why)
                )
        return spb.EndTransactionResponse(status=status(C.OK))

    # -- check-backs (called from the check threads) ----------------------------
    def deliver_check(self, req: Any) -> str:
        """Send a check-back on the Telemetry stream of a live producer of the
        half's topic (the sending client first); return its client id.
        ``NoProducerOnlineError`` when there is none (the check reached
        nobody: not counted)."""
        from broker_core.transaction import NoProducerOnlineError

        target = None
        cid = self.tx_client.get(req.transaction_id)
        c = self.clients.get(cid) if cid else None
        if c is not None and c.queue is not None:
            target = c
        if target is None:
            producers = [
                x
                for x in list(self.clients.values())
                if x.queue is not None and x.client_type == "PRODUCER"
            ]
            # Only a producer that declares the half's topic: any other
            # application's checker could answer COMMIT for a transaction it
            # never saw. None online: the caller falls back to the group's
            # webhook, if one is configured.
            target = next((x for x in producers if req.topic in x.topics), None)
        if target is None or self.loop is None:
            raise NoProducerOnlineError(
                f"no live producer of topic {req.topic!r} (nor the sending client)"
            )
        props = dict(req.properties)
        sp = pb.SystemProperties(
            message_id=req.msg_id,
            body_digest=body_digest(req.body),
            body_encoding=pb.IDENTITY,
            message_type=pb.TRANSACTION,
            born_timestamp=ts_ms(req.born_timestamp),
            born_host="127.0.0.1",
        )
        if req.tags:
            sp.tag = req.tags
        if req.keys:
            sp.keys.extend(req.keys.split(" "))
        msg = pb.Message(
            topic=pb.Resource(name=req.topic),
            user_properties={k: v for k, v in props.items() if k not in SYSTEM_PROPS},
            system_properties=sp,
            body=req.body,
        )
        cmd = spb.TelemetryCommand(
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=msg, transaction_id=req.transaction_id
            )
        )
        q = target.queue
        assert q is not None
        self.loop.call_soon_threadsafe(q.put_nowait, cmd)
        self.counters["checks_sent"] += 1
        self.checks_out[req.transaction_id] = (time.monotonic(), target.client_id)
        while len(self.checks_out) > 100_000:
            self.checks_out.popitem(last=False)
        return target.client_id


class GrpcCheckTransport(CheckTransport):
    """A ``CheckTransport`` sending RecoverOrphanedTransactionCommand on a live
    producer's Telemetry stream; the answer comes back as EndTransaction.
    Under ``serve --workers N``, a producer on another worker is reached
    through the Redis relay (every worker listens on it).

    With ``group`` set and no live producer, the group's persisted checker of
    another kind (a webhook) is asked instead."""

    name = "grpc"

    def __init__(self, transactions: Transactions, group: str | None = None) -> None:
        self.transactions = transactions
        self.group = group
        self._target = "-"

    @property
    def target(self) -> str:
        return self._target

    def _fallback(self) -> Any:
        if self.group is None:
            return None
        # The live kind ("grpc") is this endpoint itself: not a fallback.
        return self.transactions.tx.checkers.stored_transport(
            self.group, (None, "grpc")
        )

    def check(self, request: Any) -> Any:
        from broker_core.transaction import (
            CheckAnswer,
            CheckBackError,
            NoProducerOnlineError,
        )

        try:
            self._target = self.transactions.deliver_check(request)
            return CheckAnswer.SENT
        except NoProducerOnlineError as nobody:
            failed: CheckBackError = nobody
            peers = self.transactions.peers
            if peers is not None:
                # A worker of ``serve --workers N``: the producer's Telemetry
                # stream may live on another worker.
                try:
                    answer = peers.check(request)
                    self._target = peers.target
                    return answer
                except NoProducerOnlineError:
                    pass
                except CheckBackError as exc:
                    # The relay may have reached a worker (a late answer):
                    # not "nobody", so the check counts if nothing else answers.
                    failed = exc
            fb = self._fallback()
            if fb is None:
                raise failed from None
            self._target = f"fallback:{fb.target}"
            return fb.check(request)
