"""``serve --front native``: the endpoint's RPCs behind the native gRPC front.

The front (``native/front.cc``, built by ``make native`` into
``broker_core._native``) terminates gRPC in C++ and hands calls over in
batches: ``drain()`` returns every call, request message, half-close and
cancellation since the last one (the GIL taken once), and the answers of one
loop iteration (stream messages, ends) go back in one ``submit()``. The front
is served by the event loop's own thread between its turns (by default,
``BROKER_NATIVE_THREADS=0``: ``_PollingSelector``, whose select polls the
front's completion queue, the GIL released), or by N completion-queue threads
of its own (``BROKER_NATIVE_THREADS=N``) with an eventfd to wake the loop.
Everything else is the endpoint's own Python: each call runs the handler
``server.endpoint_methods`` wraps for grpc.aio (authentication, BAD_REQUEST
for what does not decode, forwarding, namespaces), with a ``NativeContext``
that answers what handlers ask of a grpc.aio ServicerContext. A cancelled
call (client gone, deadline passed) has its task cancelled, as grpc.aio does.

The calls of one drain to an RPC with a batch wrapping (``Method.batch``:
SendMessage, AckMessage) are served at once, on the event loop, with no task
per call: the same checks call by call, one append (one pop-state
transaction) for them all, their answers in the drain's one ``submit``; a
call the batch cannot answer without waiting (forwarding, the writer busy,
the pop state in use) becomes a task like any other."""

from __future__ import annotations

import asyncio
import logging
import os
import select
import selectors
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from broker_core.endpoint.coalesce import PER_CALL
from broker_core.endpoint.server import Method

log = logging.getLogger("broker_core.endpoint.native")

#: gRPC status UNKNOWN: a handler that raised (as grpc.aio answers)
_UNKNOWN = 2
#: Under load (the last hand-over took several calls), the event loop is
#: woken for the front's calls at most once in this many microseconds: one
#: hand-over then takes the calls of that time together, instead of a wake-up
#: (two thread switches) for every call or two. Otherwise (a quiet spell, a
#: lone client's calls one after another) at once.
#: ``$BROKER_NATIVE_COALESCE_US``; 0: wake for every call.
DEFAULT_COALESCE_US = 1000
#: Completion-queue threads of the front's own (``$BROKER_NATIVE_THREADS``).
#: 0, the default: none, the event loop's thread serves gRPC itself between
#: its turns (``_PollingSelector``): no hand-over between a gRPC thread and
#: the loop; it measured -7 to -9% of server CPU a send, and within the
#: noise a received message (alternating rounds, server over client CPU;
#: docs/grpc.md, "Native front"). N: N threads of the front's own, the loop
#: woken through an eventfd.
DEFAULT_THREADS = 0
_END = object()


def load() -> Any:
    """The extension module, or SystemExit saying how to build it."""
    try:
        from broker_core import _native  # type: ignore[attr-defined]
    except ImportError as exc:
        raise SystemExit(
            f"--front native: the native front is not built ({exc}); run `make native`"
        ) from None
    return _native


class NativeContext:
    """What the handlers ask of a grpc.aio ServicerContext, for a call of the
    native front."""

    __slots__ = ("_metadata", "_peer", "_deadline", "_cancelled", "code", "details")

    def __init__(
        self, metadata: tuple[tuple[str, Any], ...], peer: str, timeout: float | None
    ) -> None:
        self._metadata = metadata
        self._peer = peer
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._cancelled = False
        self.code: Any = None
        self.details: str | None = None

    def invocation_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def cancelled(self) -> bool:
        return self._cancelled

    def done(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """The client went away (the front's cancel event)."""
        self._cancelled = True

    def set_code(self, code: Any) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details


class _FrontKeys(Mapping[Any, selectors.SelectorKey]):
    """The keys of a ``_PollingSelector``: the inner selector's and the
    front's own."""

    def __init__(self, sel: _PollingSelector) -> None:
        self._sel = sel

    def __len__(self) -> int:
        return len(self._sel.inner.get_map()) + (self._sel.key is not None)

    def __getitem__(self, fileobj: Any) -> selectors.SelectorKey:
        return self._sel.get_key(fileobj)

    def __iter__(self) -> Iterator[Any]:
        yield from self._sel.inner.get_map()
        if self._sel.key is not None:
            yield self._sel.key.fd


class _PollingSelector(selectors.BaseSelector):
    """The event loop's selector while its own thread serves gRPC (the front
    started with no threads of its own: ``BROKER_NATIVE_THREADS=0``). A
    ``select`` polls the front (gRPC's completion queue, the GIL released)
    instead of the loop's epoll, and reports the front's reader (the
    eventfd ``add_reader`` registered, never signalled) ready while calls
    wait: no thread hands calls to the loop, and answers complete where they
    were given. The loop's other file descriptors stay in the inner
    selector; a watcher thread pokes the front when one of them is ready
    (a signal, a socket of the loop's own), and ``call_soon_threadsafe``
    pokes it directly."""

    def __init__(self, loop: Any, front: Any) -> None:
        self.loop = loop
        #: the loop's own (epoll) selector: its fd is what the watcher polls
        self.inner: Any = loop._selector
        self.front = front
        self.fd = front.fileno()
        self.key: selectors.SelectorKey | None = None
        self._map = _FrontKeys(self)
        self._poked = False
        self._seen = threading.Event()
        self._stopped = False
        self._watcher = threading.Thread(
            target=self._watch, name="native-front-watch", daemon=True
        )

    # -- installed on the running loop ----------------------------------------
    def attach(self) -> None:
        loop = self.loop
        loop._selector = self
        loop._write_to_self = self.front.poke
        self._watcher.start()

    def detach(self) -> None:
        """Give the loop its own selector back (its keys are all there)."""
        self._stopped = True
        self._seen.set()
        loop = self.loop
        if loop._selector is self:
            loop._selector = self.inner
        loop.__dict__.pop("_write_to_self", None)

    def _watch(self) -> None:
        poller = select.poll()
        poller.register(self.inner.fileno(), select.POLLIN)
        while not self._stopped:
            if not poller.poll(1000) or self._stopped:
                continue
            self._poked = True
            self.front.poke()
            # until the loop has looked at its descriptors
            self._seen.wait()
            self._seen.clear()

    # -- selectors.BaseSelector -----------------------------------------------
    def register(
        self, fileobj: Any, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        if fd != self.fd:
            return self.inner.register(fileobj, events, data)
        if self.key is not None:
            raise KeyError(f"{fileobj!r} is already registered")
        self.key = selectors.SelectorKey(fileobj, fd, events, data)
        return self.key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        key = self.key
        if key is not None and fileobj in (key.fileobj, key.fd):
            self.key = None
            return key
        return self.inner.unregister(fileobj)

    def modify(
        self, fileobj: Any, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        key = self.key
        if key is not None and fileobj in (key.fileobj, key.fd):
            self.key = selectors.SelectorKey(key.fileobj, key.fd, events, data)
            return self.key
        return self.inner.modify(fileobj, events, data)

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        key = self.key
        if key is not None and fileobj in (key.fileobj, key.fd):
            return key
        return self.inner.get_key(fileobj)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._map

    def select(
        self, timeout: float | None = None
    ) -> list[tuple[selectors.SelectorKey, int]]:
        if self._stopped:
            return self.inner.select(timeout)
        ready = self.inner.select(0)
        if self._poked:
            self._poked = False
            self._seen.set()
        if ready:
            waiting = self.front.poll(0.0)
        else:
            waiting = self.front.poll(-1.0 if timeout is None else max(0.0, timeout))
            ready = self.inner.select(0)
        key = self.key
        if waiting and key is not None and key.events & selectors.EVENT_READ:
            ready.append((key, selectors.EVENT_READ))
        return ready

    def close(self) -> None:
        self.detach()
        self.inner.close()


class _Call:
    __slots__ = ("task", "queue", "context")

    def __init__(self, context: NativeContext) -> None:
        self.context = context
        self.task: asyncio.Task[None] | None = None
        self.queue: asyncio.Queue[Any] | None = None


class NativeServer:
    """The native front serving ``methods`` (``server.endpoint_methods``);
    ``add_insecure_port`` / ``add_secure_port`` before ``start``, which
    binds and returns the ports."""

    def __init__(
        self,
        methods: list[Method],
        max_message: int,
        reuseport: bool = False,
        coalesce_us: int | None = None,
    ) -> None:
        if coalesce_us is None:
            coalesce_us = int(
                os.environ.get("BROKER_NATIVE_COALESCE_US", DEFAULT_COALESCE_US)
            )
        native = load()
        self._native = native
        self.methods = methods
        self.front = native.Front(
            [m.path for m in methods],
            [m.kind == "bidi" for m in methods],
            max_message,
            reuseport,
            coalesce_us,
        )
        #: (address, PEM key, PEM certificate chain; both "" for plaintext)
        self.addresses: list[tuple[str, str, str]] = []
        self.calls: dict[int, _Call] = {}
        self._out: list[tuple[int, int, bytes | None, int, str | None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        #: the loop's selector while its thread polls the front
        self._selector: _PollingSelector | None = None
        self._new = native.NEW_CALL
        self._message = native.MESSAGE
        self._half_close = native.HALF_CLOSE
        self._cancel = native.CANCELLED
        self._write = native.WRITE
        self._finish = native.FINISH

    def add_insecure_port(self, address: str) -> None:
        self.addresses.append((address, "", ""))

    def add_secure_port(self, address: str, key_pem: str, cert_pem: str) -> None:
        self.addresses.append((address, key_pem, cert_pem))

    async def start(self) -> list[int]:
        """Listen and serve; the bound ports, in ``add_insecure_port`` order.
        SystemExit when one cannot be bound."""
        for address, key, cert in self.addresses:
            self.front.add_port(address, key, cert)
        threads = int(os.environ.get("BROKER_NATIVE_THREADS", DEFAULT_THREADS))
        loop = asyncio.get_running_loop()
        own = getattr(loop, "_selector", None)
        if threads < 1 and not (
            isinstance(own, selectors.BaseSelector) and hasattr(own, "fileno")
        ):
            threads = 1  # no selector of a pollable fd: a thread of its own
        if not self.front.start(threads):
            where = ", ".join(a for a, _k, _c in self.addresses)
            raise SystemExit(f"cannot listen on {where}")
        self._loop = loop
        if self.front.polling:
            self._selector = _PollingSelector(self._loop, self.front)
            self._selector.attach()
        self._loop.add_reader(self.front.fileno(), self._drain)
        return list(self.front.bound_ports())

    async def stop(self, grace: float) -> None:
        """Refuse new calls, give those in flight ``grace`` seconds (their
        answers still go out), then cancel the rest."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.front.shutdown, grace)
        loop.remove_reader(self.front.fileno())
        if self._selector is not None:
            self._selector.detach()
        for call in list(self.calls.values()):
            if call.task is not None:
                call.task.cancel()
        self.calls.clear()

    def stats(self) -> dict[str, int]:
        return dict(self.front.stats())

    # -- the hand-overs ------------------------------------------------------
    def _drain(self) -> None:
        loop = self._loop
        assert loop is not None
        calls = self.calls
        call: _Call | None
        #: method index -> its calls of this drain for ``Method.batch``
        batched: dict[int, list[tuple[int, bytes, NativeContext]]] = {}
        held: dict[int, NativeContext] = {}
        for kind, cid, index, md, peer, timeout, data in self.front.drain():
            if kind == self._new:
                m = self.methods[index]
                ctx = NativeContext(md, peer, timeout)
                if m.batch is not None:
                    held[cid] = ctx
                    batched.setdefault(index, []).append((cid, data, ctx))
                    continue
                new = calls[cid] = _Call(ctx)
                if m.kind == "unary":
                    coro: Any = self._unary(cid, m, data, ctx)
                elif m.kind == "server_stream":
                    coro = self._stream(cid, m, m.decode(data), ctx)
                else:
                    new.queue = asyncio.Queue()
                    coro = self._stream(cid, m, _requests(new.queue), ctx)
                new.task = loop.create_task(coro)
            elif kind == self._message:
                call = calls.get(cid)
                if call is not None and call.queue is not None:
                    call.queue.put_nowait(self.methods[index].decode(data))
            elif kind == self._half_close:
                call = calls.get(cid)
                if call is not None and call.queue is not None:
                    call.queue.put_nowait(_END)
            elif kind == self._cancel:
                call = calls.pop(cid, None)
                if call is not None:
                    call.context.cancel()
                    if call.task is not None:
                        call.task.cancel()
                elif cid in held:
                    held[cid].cancel()  # gone before its batch ran
        if batched:
            for index, items in batched.items():
                self._batch(self.methods[index], items)
            self._flush()

    def _batch(self, m: Method, items: list[tuple[int, bytes, NativeContext]]) -> None:
        """The unary calls of one drain to ``m`` at once (``Method.batch``):
        their answers queued for this drain's one ``submit``; a call the
        batch leaves (``PER_CALL``) becomes a task as any other."""
        assert m.batch is not None and self._loop is not None
        live = [it for it in items if not it[2].cancelled()]
        decode = m.decode
        try:
            answers = m.batch([(decode(data), ctx) for _cid, data, ctx in live])
        except Exception as exc:  # noqa: BLE001 - each call fails with it
            answers = [exc] * len(live)
        out, finish, encode = self._out, self._finish, m.encode
        for (cid, data, ctx), r in zip(live, answers, strict=True):
            if r is PER_CALL:
                call = self.calls[cid] = _Call(ctx)
                call.task = self._loop.create_task(self._unary(cid, m, data, ctx))
                continue
            if not isinstance(r, Exception):
                try:
                    out.append((cid, finish, encode(r), 0, None))
                    continue
                except Exception as exc:  # noqa: BLE001
                    r = exc
            log.error("%s failed", m.name, exc_info=r)
            out.append((cid, finish, None, _UNKNOWN, f"{type(r).__name__}"))

    def _send(self, op: tuple[int, int, bytes | None, int, str | None]) -> None:
        if not self._out:
            assert self._loop is not None
            self._loop.call_soon(self._flush)
        self._out.append(op)

    def _flush(self) -> None:
        if self._out:
            ops, self._out = self._out, []
            self.front.submit(ops)

    # -- the calls -----------------------------------------------------------
    async def _unary(
        self, cid: int, m: Method, data: bytes, ctx: NativeContext
    ) -> None:
        try:
            resp = await m.handler(m.decode(data), ctx)
            self._send((cid, self._finish, m.encode(resp), 0, None))
        except asyncio.CancelledError:
            pass  # the client is gone: nobody to answer
        except Exception as exc:  # noqa: BLE001 - answered as grpc.aio does
            log.exception("%s failed", m.name)
            self._send((cid, self._finish, None, _UNKNOWN, f"{type(exc).__name__}"))
        finally:
            self.calls.pop(cid, None)

    async def _stream(self, cid: int, m: Method, req: Any, ctx: NativeContext) -> None:
        """A server-streaming call (``req`` its request) or a bidirectional
        one (``req`` the async iterator of its requests)."""
        try:
            async for out in m.handler(req, ctx):
                self._send((cid, self._write, m.encode(out), 0, None))
            self._send((cid, self._finish, None, 0, None))
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001
            log.exception("%s failed", m.name)
            self._send((cid, self._finish, None, _UNKNOWN, f"{type(exc).__name__}"))
        finally:
            self.calls.pop(cid, None)


async def _requests(queue: asyncio.Queue[Any]) -> AsyncIterator[Any]:
    """A bidirectional call's requests as they arrive, until the client
    closes its side (None: one that did not decode)."""
    while True:
        x = await queue.get()
        if x is _END:
            return
        yield x
