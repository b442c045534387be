"""Client-side scenarios run in a subprocess with the unmodified official
RocketMQ Python client (its generated stubs and ours never share
an interpreter with the tests). Usage: ``python scenarios.py NAME ENDPOINT
SUFFIX``; the last line printed is ``RESULT <json>``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

EP = sys.argv[2]
SUF = sys.argv[3]
CFG = ClientConfiguration(
    EP, Credentials(os.environ.get("MQ_AK", ""), os.environ.get("MQ_SK", ""))
)


def msg(topic, body, tag=None, keys=None, props=None, group=None, deliver_at=None):
    m = Message()
    m.topic = topic
    m.body = body if isinstance(body, bytes) else body.encode()
    if tag:
        m.tag = tag
    if keys:
        m.keys = keys
    for k, v in (props or {}).items():
        m.add_property(k, v)
    if group:
        m.message_group = group
    if deliver_at:
        m.delivery_timestamp = deliver_at
    return m


def drain(c, want, timeout=15.0, invisible=20, ack=True):
    out = []
    end = time.time() + timeout
    while len(out) < want and time.time() < end:
        for m in c.receive(32, invisible):
            out.append(m)
            if ack:
                c.ack(m)
    return out


TLS = os.environ.get("MQ_TLS") == "1"


def producer(topics, checker=None):
    p = Producer(CFG, tuple(topics), checker=checker, tls_enable=TLS)
    p.startup()
    return p


def consumer(group, subs, await_s=2):
    c = SimpleConsumer(CFG, group, subs, await_duration=await_s, tls_enable=TLS)
    c.startup()
    return c


def s_normal():
    t, g = f"TN{SUF}", f"GN{SUF}"
    p = producer([t])
    c = consumer(g, {t: FilterExpression("*")})
    ids = [
        p.send(msg(t, f"m{i}", tag="a", keys=f"k{i}", props={"n": str(i)})).message_id
        for i in range(5)
    ]
    futs = [p.send_async(msg(t, f"async{i}")) for i in range(5)]
    ids += [f.result(timeout=10).message_id for f in futs]
    got = drain(c, 10)
    empty = c.receive(32, 20)
    res = {
        "sent_ids": ids,
        "got_ids": [m.message_id for m in got],
        "bodies": sorted(m.body.decode() for m in got),
        "props": {m.body.decode(): m.properties for m in got},
        "tags": sorted({m.tag for m in got if m.tag}),
        "keys": sorted(k for m in got for k in (m.keys or [])),
        "empty_after": len(empty),
    }
    c.shutdown()
    p.shutdown()
    return res


def s_invisible():
    t, g = f"TI{SUF}", f"GI{SUF}"
    p = producer([t])
    c = consumer(g, {t: FilterExpression("*")})
    p.send(msg(t, "once"))
    first = drain(c, 1, ack=False, invisible=2)
    t0 = time.time()
    again = drain(c, 1, ack=False, invisible=2, timeout=10)
    waited = time.time() - t0
    m = again[0]
    old_handle = m.receipt_handle
    c.change_invisible_duration(m, 3)
    stale_err = None
    # ack with the old handle must fail (40013); the new one succeeds
    m2 = again[0]
    new_handle = m2.receipt_handle
    m2.receipt_handle = old_handle
    try:
        c.ack(m2)
    except Exception as e:  # noqa: BLE001
        stale_err = getattr(e, "code", None) or str(e)
    m2.receipt_handle = new_handle
    none_yet = c.receive(32, 5)
    c.ack(m2)
    after = c.receive(32, 5)
    c.shutdown()
    p.shutdown()
    return {
        "first_attempt": first[0].delivery_attempt,
        "second_attempt": m.delivery_attempt,
        "waited": waited,
        "handle_changed": old_handle != new_handle,
        "stale_err": str(stale_err),
        "none_while_invisible": len(none_yet),
        "after_ack": len(after),
    }


def s_filters():
    t = f"TF{SUF}"
    p = producer([t])
    for i, tag in enumerate(["a", "b", "c", "a", "d"]):
        p.send(
            msg(
                t,
                f"{tag}{i}",
                tag=tag,
                props={"price": str(i * 10), "region": "eu" if i % 2 else "us"},
            )
        )
    ct = consumer(f"GFT{SUF}", {t: FilterExpression("a||b")})
    cs = consumer(f"GFS{SUF}", {t: _sql("price >= 20 AND region = 'us'")})
    tag_got = sorted(m.body.decode() for m in drain(ct, 3, timeout=6))
    sql_got = sorted(m.body.decode() for m in drain(cs, 2, timeout=6))
    ct.shutdown()
    cs.shutdown()
    p.shutdown()
    return {"tag": tag_got, "sql": sql_got}


def _sql(expr):
    from rocketmq.grpc_protocol import FilterType

    return FilterExpression(expr, FilterType.SQL)


def s_delay():
    t, g = f"TD{SUF}", f"GD{SUF}"
    p = producer([t])
    c = consumer(g, {t: FilterExpression("*")}, await_s=1)
    t0 = time.time()
    r = p.send(msg(t, "later", deliver_at=int(time.time()) + 3))
    r2 = p.send(msg(t, "recalled", deliver_at=int(time.time()) + 3))
    recalled = p.recall_message(t, r2.recall_handle)
    early = c.receive(32, 20)
    # Due in 2-3 s; under a loaded suite (every scenario's clients at once on
    # two cores) a CI run once saw none within 10 s: the wait is not the check.
    got = drain(c, 1, timeout=30)
    elapsed = time.time() - t0
    time.sleep(1.5)
    extra = c.receive(32, 20)
    c.shutdown()
    p.shutdown()
    return {
        "early": len(early),
        "got": [m.body.decode() for m in got],
        "elapsed": elapsed,
        "recall_handle": bool(r.recall_handle),
        "recalled_id": str(recalled),
        "extra": [m.body.decode() for m in extra],
    }


def s_fifo():
    t, g = f"TO{SUF}", f"GO{SUF}"
    p = producer([t])
    for i in range(6):
        for grp in ("g1", "g2"):
            p.send(msg(t, f"{grp}-{i}", group=grp))
    c = consumer(g, {t: FilterExpression("*")})
    order = []
    max_batch = 0
    end = time.time() + 30
    while len(order) < 12 and time.time() < end:
        batch = c.receive(32, 10)
        groups = [m.message_group for m in batch]
        max_batch = max(max_batch, len(batch))
        if len(groups) != len(set(groups)):
            return {"error": "two messages of one group in flight", "batch": groups}
        for m in batch:
            order.append(m.body.decode())
            c.ack(m)
    c.shutdown()
    p.shutdown()
    return {"order": order, "max_batch": max_batch}


class Checker(TransactionChecker):
    def __init__(self):
        self.seen = []

    def check(self, message):
        self.seen.append(message.body.decode())
        return TransactionResolution.COMMIT


def s_transaction():
    t, g = f"TX{SUF}", f"GX{SUF}"
    chk = Checker()
    p = producer([t], checker=chk)
    c = consumer(g, {t: FilterExpression("*")}, await_s=1)
    tx = p.begin_transaction()
    r1 = p.send(msg(t, "committed"), tx)
    tx.commit()
    tx2 = p.begin_transaction()
    p.send(msg(t, "rolled-back"), tx2)
    tx2.rollback()
    tx3 = p.begin_transaction()
    p.send(msg(t, "checked"), tx3)  # never resolved: the check-back commits it
    got = drain(c, 2, timeout=25)
    time.sleep(1)
    extra = c.receive(32, 20)
    for m in extra:
        c.ack(m)
    c.shutdown()
    p.shutdown()
    return {
        "got": sorted(m.body.decode() for m in got + extra),
        "checked": chk.seen,
        "tx_id": bool(r1.transaction_id),
    }


def s_unrelated_checker():
    """A half whose sender is gone; another application's producer (another
    topic, a checker that would COMMIT anything) stays online for three check
    rounds. It must never be asked."""
    ta, tb = f"TXA{SUF}", f"TXB{SUF}"
    pa = producer([ta], checker=Checker())
    tx = pa.begin_transaction()
    pa.send(msg(ta, "orphan"), tx)
    pa.shutdown()  # the sender is gone, the half stays pending
    other = Checker()
    pb = producer([tb], checker=other)
    pb.send(msg(tb, "unrelated"))  # online and known to the endpoint
    time.sleep(7)  # transaction timeout 1 s, check interval 2 s: 3 rounds
    pb.shutdown()
    return {"asked_unrelated": other.seen}


def s_push_dlq():
    from rocketmq import PushConsumer
    from rocketmq.v5.consumer.push import MessageListener

    t, g = f"TP{SUF}", f"GP{SUF}"
    attempts = []
    lock = threading.Lock()

    class Failing(MessageListener):
        def consume(self, message):
            with lock:
                attempts.append((message.body.decode(), message.delivery_attempt))
            return ConsumeResult.FAILURE

    p = producer([t])
    pc = PushConsumer(CFG, g, Failing(), {t: FilterExpression("*")})
    pc.startup()
    p.send(msg(t, "poison"))
    end = time.time() + 30
    dlq = []
    dc = consumer(f"GDLQ{SUF}", {f"%DLQ%{g}": FilterExpression("*")}, await_s=1)
    while time.time() < end and not dlq:
        try:
            dlq = dc.receive(32, 20)
        except Exception:  # noqa: BLE001 - no route until the first dead letter
            time.sleep(1)  # (TOPIC_NOT_FOUND, as Apache answers)
    for m in dlq:
        dc.ack(m)
    pc.shutdown()
    dc.shutdown()
    p.shutdown()
    return {
        "attempts": attempts,
        "dlq": [
            (m.topic, m.body.decode(), m.properties.get("RETRY_TOPIC")) for m in dlq
        ],
    }


def _push(group, topic, listener_fn):
    from rocketmq import PushConsumer
    from rocketmq.v5.consumer.push import MessageListener

    class L(MessageListener):
        def consume(self, message):
            return listener_fn(message)

    pc = PushConsumer(CFG, group, L(), {topic: FilterExpression("*")})
    pc.startup()
    return pc


def s_push_ok():
    t, g = f"TPS{SUF}", f"GPS{SUF}"
    seen = []
    lock = threading.Lock()

    def ok(m):
        with lock:
            seen.append(m.body.decode())
        return ConsumeResult.SUCCESS

    p = producer([t])
    pc = _push(g, t, ok)
    for i in range(20):
        p.send(msg(t, f"p{i}"))
    end = time.time() + 30
    while time.time() < end and len(seen) < 20:
        time.sleep(0.2)
    time.sleep(2)  # nothing more arrives once acknowledged
    pc.shutdown()
    p.shutdown()
    out = {"seen": sorted(seen)}
    if len(seen) != 20:  # what the client said went wrong, for the report
        out["client_errors"] = _client_errors(g)
    return out


def _client_errors(group):
    log = os.path.expanduser("~/logs/rocketmq_python/rocketmq_client.log")
    try:
        with open(log, errors="replace") as f:
            return [ln for ln in f if group in ln and "[ERROR]" in ln][-20:]
    except OSError as exc:
        return [str(exc)]


def s_push_fifo_dlq():
    t, g = f"TPF{SUF}", f"GPF{SUF}"
    seen = []
    lock = threading.Lock()

    def fn(m):
        with lock:
            seen.append((m.body.decode(), m.delivery_attempt))
        if m.body == b"bad":
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS

    p = producer([t])
    pc = _push(g, t, fn)
    for body in ("first", "bad", "after"):
        p.send(msg(t, body, group="order-1"))
    dc = consumer(f"GDF{SUF}", {f"%DLQ%{g}": FilterExpression("*")}, await_s=1)
    dlq = []
    end = time.time() + 40
    while time.time() < end and not (dlq and any(b == "after" for b, _ in seen)):
        try:
            got = dc.receive(32, 20)
        except Exception:  # noqa: BLE001 - no route until the first dead letter
            time.sleep(1)
            continue
        for m in got:
            dlq.append(m.body.decode())
            dc.ack(m)
    pc.shutdown()
    dc.shutdown()
    p.shutdown()
    return {"seen": seen, "dlq": dlq}


def s_bad():
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as spb
    from rocketmq.grpc_protocol import service_pb2_grpc as sg

    ch = grpc.insecure_channel(EP, options=[("grpc.max_send_message_length", 64 << 20)])
    st = sg.MessagingServiceStub(ch)
    md = (("x-mq-client-id", f"bad-{SUF}"),)
    out = {}

    def send(topic, body, user=None, **sp):
        m = pb.Message(
            topic=pb.Resource(name=topic),
            body=body,
            user_properties=user or {},
            system_properties=pb.SystemProperties(message_id="X", **sp),
        )
        r = st.SendMessage(
            spb.SendMessageRequest(messages=[m]), metadata=md, timeout=10
        )
        return pb.Code.Name(r.status.code)

    t = f"TB{SUF}"
    out["ok"] = send(t, b"fine")
    out["oversized"] = send(t, b"x" * (4 * 1024 * 1024 + 1))
    out["empty_body"] = send(t, b"")
    out["invalid_topic"] = send("bad topic!", b"x")
    out["empty_topic"] = send("", b"x")
    # Injection: separators in a user property, a tag, a key or a message
    # group, and user properties named like system ones, are all refused.
    out["prop_separator"] = send(t, b"x", user={"k": "v\x02DELAY\x013"})
    out["prop_name_separator"] = send(t, b"x", user={"a\x01b": "v"})
    out["prop_reserved_delay"] = send(t, b"x", user={"DELAY": "3"})
    out["prop_reserved_uniq"] = send(t, b"x", user={"UNIQ_KEY": "forged"})
    out["prop_reserved_sharding"] = send(t, b"x", user={"__SHARDINGKEY": "g"})
    out["tag_separator"] = send(t, b"x", tag="a\x02TRAN_MSG\x01true")
    out["key_separator"] = send(t, b"x", keys=["k\x02PGROUP\x01x"])
    # Any control character, and a key of whitespace only, as Apache refuses
    # (a tag with a newline, an escape or DEL was stored).
    out["tag_newline"] = send(t, b"x", tag="a\nb")
    out["tag_escape"] = send(t, b"x", tag="a\x1bb")
    out["tag_del"] = send(t, b"x", tag="a\x7fb")
    out["key_blank"] = send(t, b"x", keys=[" "])
    out["key_newline"] = send(t, b"x", keys=["a\nb"])
    out["group_separator"] = send(t, b"x", message_group="g\x02DELAY\x011")
    out["prop_plain"] = send(t, b"x", user={"region": "eu", "amount": "3"})
    out["no_messages"] = pb.Code.Name(
        st.SendMessage(spb.SendMessageRequest(), metadata=md, timeout=5).status.code
    )
    out["route_invalid"] = pb.Code.Name(
        st.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name="a/b")), metadata=md, timeout=5
        ).status.code
    )
    out["unknown_tx"] = pb.Code.Name(
        st.EndTransaction(
            spb.EndTransactionRequest(
                topic=pb.Resource(name=t),
                message_id="X",
                transaction_id="7F00000100002A9F0000000000ABCDEF",
                resolution=pb.COMMIT,
                source=pb.SOURCE_CLIENT,
            ),
            metadata=md,
            timeout=5,
        ).status.code
    )
    out["empty_tx"] = pb.Code.Name(
        st.EndTransaction(
            spb.EndTransactionRequest(topic=pb.Resource(name=t)), metadata=md, timeout=5
        ).status.code
    )
    g = pb.Resource(name=f"GB{SUF}")
    out["ack_malformed"] = pb.Code.Name(
        st.AckMessage(
            spb.AckMessageRequest(
                group=g,
                topic=pb.Resource(name=t),
                entries=[spb.AckMessageEntry(message_id="X", receipt_handle="garbage")],
            ),
            metadata=md,
            timeout=5,
        ).status.code
    )
    # receive the message, ack it, then ack it again: stale
    rq = spb.ReceiveMessageRequest(
        group=g,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=t)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=1,
    )
    rq.invisible_duration.FromSeconds(10)
    rq.long_polling_timeout.FromSeconds(2)
    handle = None
    for item in st.ReceiveMessage(rq, metadata=md, timeout=10):
        if item.HasField("message"):
            handle = item.message.system_properties.receipt_handle

    def ack():
        req = spb.AckMessageRequest(
            group=g,
            topic=pb.Resource(name=t),
            entries=[spb.AckMessageEntry(message_id="X", receipt_handle=handle)],
        )
        return pb.Code.Name(st.AckMessage(req, metadata=md, timeout=5).status.code)

    out["ack_first"] = ack()
    out["ack_stale"] = ack()
    ci = spb.ChangeInvisibleDurationRequest(
        group=g, topic=pb.Resource(name=t), receipt_handle=handle
    )
    ci.invisible_duration.FromSeconds(5)
    out["change_stale"] = pb.Code.Name(
        st.ChangeInvisibleDuration(ci, metadata=md, timeout=5).status.code
    )

    def recv_code(req):
        codes = [
            pb.Code.Name(i.status.code)
            for i in st.ReceiveMessage(req, metadata=md, timeout=10)
            if i.HasField("status")
        ]
        return codes[0] if codes else "NONE"

    bad_sql = spb.ReceiveMessageRequest()
    bad_sql.CopyFrom(rq)
    bad_sql.filter_expression.type = pb.SQL
    bad_sql.filter_expression.expression = "a >>> 'x"
    out["bad_sql"] = recv_code(bad_sql)
    no_group = spb.ReceiveMessageRequest()
    no_group.CopyFrom(rq)
    no_group.ClearField("group")
    out["no_group"] = recv_code(no_group)
    bad_inv = spb.ReceiveMessageRequest()
    bad_inv.CopyFrom(rq)
    bad_inv.invisible_duration.FromMilliseconds(10)
    out["bad_invisible"] = recv_code(bad_inv)
    no_topic = spb.ReceiveMessageRequest()
    no_topic.CopyFrom(rq)
    no_topic.message_queue.topic.name = "NoSuchTopic" + SUF
    out["unknown_topic_receive"] = recv_code(no_topic)
    out["recall_unknown"] = pb.Code.Name(
        st.RecallMessage(
            spb.RecallMessageRequest(topic=pb.Resource(name=t), recall_handle="nope"),
            metadata=md,
            timeout=5,
        ).status.code
    )
    raw = ch.unary_unary(
        "/apache.rocketmq.v2.MessagingService/SendMessage",
        request_serializer=None,
        response_deserializer=spb.SendMessageResponse.FromString,
    )
    try:
        out["garbage"] = pb.Code.Name(
            raw(b"\xff\xff\xff garbage", timeout=5).status.code
        )
    except grpc.RpcError as e:
        out["garbage"] = e.code().name
    out["get_offset"] = pb.Code.Name(
        st.GetOffset(spb.GetOffsetRequest(group=g), metadata=md, timeout=5).status.code
    )
    out["pull"] = [
        pb.Code.Name(i.status.code)
        for i in st.PullMessage(spb.PullMessageRequest(group=g), metadata=md, timeout=5)
    ]
    out["still_ok"] = send(t, b"after all that")
    return out


def s_relay():
    t, g = f"TY{SUF}", f"GY{SUF}"
    chk = Checker()
    p = producer([t], checker=chk)
    c = consumer(g, {t: FilterExpression("*")}, await_s=1)
    tx = p.begin_transaction()
    p.send(msg(t, "relayed"), tx)  # resolved only by the relayed check-back
    print("HALF-SENT", flush=True)
    got = drain(c, 1, timeout=40)
    c.shutdown()
    p.shutdown()
    return {"got": [m.body.decode() for m in got], "checked": chk.seen}


def s_auth():
    t, g = f"TA{SUF}", f"GA{SUF}"
    p = producer([t])
    try:
        sent = p.send(msg(t, "secret")).message_id
        err = None
    except Exception as e:  # noqa: BLE001
        sent, err = None, str(getattr(e, "code", "")) or str(e)[:200]
    got = []
    if sent:
        c = consumer(g, {t: FilterExpression("*")})
        got = [m.body.decode() for m in drain(c, 1, timeout=5)]
        c.shutdown()
    p.shutdown()
    return {"sent": bool(sent), "err": err, "got": got}


def s_retry_send():
    """Send one message with a fixed client message id, as a client's retry
    does (the official clients keep the id across attempts)."""
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as spb
    from rocketmq.grpc_protocol import service_pb2_grpc as sg

    st = sg.MessagingServiceStub(grpc.insecure_channel(EP))
    m = pb.Message(
        topic=pb.Resource(name=f"TRS{SUF}"),
        body=b"once",
        system_properties=pb.SystemProperties(
            message_id="01RETRYSEND0000000000000000000001", message_type=pb.NORMAL
        ),
    )
    r = st.SendMessage(
        spb.SendMessageRequest(messages=[m]),
        metadata=(("x-mq-client-id", f"retry-{SUF}"),),
        timeout=10,
    )
    e = r.entries[0]
    return {
        "status": pb.Code.Name(e.status.code),
        "message_id": e.message_id,
        "offset": e.offset,
    }


def s_replay():
    """Raw QueryRoute calls signed with ak1/sk1 and chosen dates."""
    import hashlib
    import hmac

    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as spb
    from rocketmq.grpc_protocol import service_pb2_grpc as sg

    st = sg.MessagingServiceStub(grpc.insecure_channel(EP))

    def call(date):
        sig = hmac.new(b"sk1", date.encode(), hashlib.sha1).hexdigest().upper()
        md = (
            ("x-mq-client-id", f"replay-{SUF}"),
            ("x-mq-date-time", date),
            (
                "authorization",
                "MQv2-HMAC-SHA1 Credential=ak1, SignedHeaders=x-mq-date-time, "
                f"Signature={sig}",
            ),
        )
        req = spb.QueryRouteRequest(topic=pb.Resource(name=f"TR{SUF}"))
        return pb.Code.Name(st.QueryRoute(req, metadata=md, timeout=5).status.code)

    now = time.gmtime()
    return {
        "fresh": call(time.strftime("%Y%m%dT%H%M%SZ", now)),
        "old": call("20190101T000000Z"),
        "ten_minutes_ago": call(
            time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() - 600))
        ),
        "garbage": call("whenever"),
    }


def s_half_only():
    t = f"TW{SUF}"
    p = producer([t], checker=Checker())
    tx = p.begin_transaction()
    r = p.send(msg(t, "via-webhook"), tx)
    p.shutdown()  # no live producer is left to answer the check
    return {"tx": r.transaction_id}


def s_orphan_half():
    """A half whose producer goes away at once (checks find nobody)."""
    t = f"TXO{SUF}"
    p = producer([t], checker=Checker())
    tx = p.begin_transaction()
    r = p.send(msg(t, "orphan"), tx)
    p.shutdown()
    return {"tx": r.transaction_id}


def s_checker_back():
    """The producer of ``s_orphan_half``'s topic is back with a checker that
    commits: online until it has been asked."""
    t = f"TXO{SUF}"
    chk = Checker()
    p = producer([t], checker=chk)
    end = time.time() + 30
    while not chk.seen and time.time() < end:
        time.sleep(0.2)
    time.sleep(1)  # its EndTransaction reaches the endpoint
    p.shutdown()
    return {"checked": chk.seen}


def s_delay_cap():
    """Delivery timestamps ``$NEAR_S`` and ``$FAR_S`` seconds ahead: the first
    is taken, the second refused (its status code and message)."""
    from rocketmq.grpc_protocol import definition_pb2 as pb

    t = f"TDC{SUF}"
    p = producer([t])
    now = int(time.time())
    near = p.send(msg(t, "near", deliver_at=now + int(os.environ["NEAR_S"])))
    try:
        p.send(msg(t, "far", deliver_at=now + int(os.environ["FAR_S"])))
        refused = None
    except Exception as exc:  # noqa: BLE001 - the client's BadRequestException
        code = getattr(exc, "code", None)
        refused = {
            "code": pb.Code.Name(code) if isinstance(code, int) else str(code),
            "message": str(exc),
        }
    p.shutdown()
    return {"near": bool(near.message_id), "refused": refused}


def _rt_names():
    return f"TRT{SUF}", f"GRT{SUF}", f"GRT2{SUF}"


def s_rt_first():
    """Group GRT fails a message until it is dead-lettered (two deliveries
    with ``--max-delivery-attempts 2``); group GRT2 consumes it normally."""
    t, g, g2 = _rt_names()
    p = producer([t])
    mid = p.send(msg(t, "poison", tag="a", props={"n": "1"})).message_id
    other = consumer(g2, {t: FilterExpression("a")}, await_s=1)
    done = drain(other, 1, timeout=15)
    other.shutdown()
    c = consumer(g, {t: FilterExpression("a")}, await_s=1)
    attempts = []
    end = time.time() + 20
    while len(attempts) < 2 and time.time() < end:
        attempts += [m.delivery_attempt for m in c.receive(1, 1)]  # never acked
    time.sleep(1.2)  # the second invisibility runs out
    after = c.receive(1, 1)  # this pop moves it to %DLQ%GRT instead
    c.shutdown()
    p.shutdown()
    return {
        "id": mid,
        "other": [m.body.decode() for m in done],
        "attempts": attempts,
        "after": len(after),
    }


def _rt_view(m):
    return {
        "topic": m.topic,
        "body": m.body.decode(),
        "id": m.message_id,
        "tag": m.tag,
        "attempt": m.delivery_attempt,
        "props": dict(m.properties),
    }


def s_rt_retry():
    """The message resent to GRT: received again (never acked) until it is
    dead-lettered again."""
    t, g, _ = _rt_names()
    c = consumer(g, {t: FilterExpression("a")}, await_s=1)
    got = []
    end = time.time() + 20
    while len(got) < 2 and time.time() < end:
        got += c.receive(1, 1)
    time.sleep(1.2)
    after = c.receive(1, 1)
    c.shutdown()
    return {"got": [_rt_view(m) for m in got], "after": len(after)}


def s_rt_once():
    """The message resent to GRT once more: received once and acked; GRT2
    receives nothing."""
    t, g, g2 = _rt_names()
    c = consumer(g, {t: FilterExpression("a")}, await_s=1)
    got = drain(c, 1, timeout=15)
    more = drain(c, 1, timeout=4)
    c.shutdown()
    other = consumer(g2, {t: FilterExpression("*")}, await_s=1)
    other_got = drain(other, 1, timeout=4)
    other.shutdown()
    return {
        "got": [_rt_view(m) for m in got + more],
        "other": [_rt_view(m) for m in other_got],
    }


def s_consume_one():
    t, g = f"TW{SUF}", f"GW{SUF}"
    c = consumer(g, {t: FilterExpression("*")}, await_s=1)
    got = drain(c, 1, timeout=25)
    c.shutdown()
    return {"got": [m.body.decode() for m in got]}


def s_restart_a():
    t, g = f"TR{SUF}", f"GR{SUF}"
    p = producer([t])
    for i in range(4):
        p.send(msg(t, f"r{i}"))
    c = consumer(g, {t: FilterExpression("*")})
    got = []
    end = time.time() + 15
    while len(got) < 3 and time.time() < end:  # one is never received
        got += c.receive(1, 4)
    acked = got[0].body.decode()
    c.ack(got[0])
    c.shutdown()
    p.shutdown()
    return {"acked": acked, "received": sorted(m.body.decode() for m in got)}


def s_restart_b():
    t, g = f"TR{SUF}", f"GR{SUF}"
    c = consumer(g, {t: FilterExpression("*")})
    got = drain(c, 3, timeout=15)
    more = c.receive(32, 20)
    c.shutdown()
    return {
        "got": sorted(m.body.decode() for m in got + more),
        "attempts": {m.body.decode(): m.delivery_attempt for m in got},
    }


def s_damage_a():
    """Six messages sent, four received (invisible 30 s), two of them acked."""
    t, g = f"TD{SUF}", f"GD{SUF}"
    p = producer([t])
    for i in range(6):
        p.send(msg(t, f"d{i}"))
    c = consumer(g, {t: FilterExpression("*")})
    got = drain(c, 4, invisible=30, ack=False)[:4]
    for m in got[:2]:
        c.ack(m)
    c.shutdown()
    p.shutdown()
    return {"acked": sorted(m.body.decode() for m in got[:2])}


def s_damage_b():
    """Receive (and ack) until every message not acked by ``damage_a`` came,
    or 20 s; then one more send, received too."""
    t, g = f"TD{SUF}", f"GD{SUF}"
    want = set(json.loads(os.environ["WANT"]))
    c = consumer(g, {t: FilterExpression("*")})
    got = []
    end = time.time() + 20
    while not want <= {m.body.decode() for m in got} and time.time() < end:
        for m in c.receive(32, 10):
            got.append(m)
            c.ack(m)
    p = producer([t])
    sent = p.send(msg(t, "after")).message_id
    late = drain(c, 1, timeout=15)
    c.shutdown()
    p.shutdown()
    return {
        "got": sorted(m.body.decode() for m in got),
        "after": [m.message_id for m in late] == [sent],
    }


class UnknownChecker(TransactionChecker):
    def __init__(self):
        self.calls = 0

    def check(self, message):
        self.calls += 1
        return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED  # "unknown"


def s_unknown_answer():
    """A half whose producer's checker keeps saying it does not know."""
    t = f"TU{SUF}"
    chk = UnknownChecker()
    p = producer([t], checker=chk)
    tx = p.begin_transaction()
    r = p.send(msg(t, "undecided"), tx)
    end = time.time() + 30
    while chk.calls < 2 and time.time() < end:
        time.sleep(0.2)
    time.sleep(1)  # the second answer reaches the endpoint
    p.shutdown()
    return {"tx": r.transaction_id, "calls": chk.calls}


def s_reset_a():
    """Send six messages and consume them all (acknowledged)."""
    t, g = f"TZ{SUF}", f"GZ{SUF}"
    p = producer([t])
    for i in range(6):
        p.send(msg(t, f"z{i}"))
    c = consumer(g, {t: FilterExpression("*")})
    got = drain(c, 6, timeout=20)
    c.shutdown()
    p.shutdown()
    return {"got": sorted(m.body.decode() for m in got)}


def s_reset_b():
    """The same group again, after an operator's reset."""
    t, g = f"TZ{SUF}", f"GZ{SUF}"
    c = consumer(g, {t: FilterExpression("*")})
    got = drain(c, 3, timeout=15)
    more = c.receive(32, 20)
    c.shutdown()
    return {"got": sorted(m.body.decode() for m in got + more)}


def s_fill():
    """Send 4 KiB messages until sends keep failing (a full disk)."""
    t = f"TF{SUF}"
    p = producer([t])
    acked, failed, errors = [], [], []
    i = 0
    while len(failed) < 3 and i < 20000:
        body = f"fill-{SUF}-{i:05d}-".ljust(4096, "x")
        i += 1
        try:
            r = p.send(msg(t, body))
            acked.append([body[:20], r.message_id])
        except Exception as exc:  # noqa: BLE001 - the client's send error
            failed.append(body[:20])
            errors.append(str(exc)[:300])
    p.shutdown()
    return {"acked": acked, "failed": failed, "errors": errors}


def s_send_few():
    """Send three more messages; all must be acknowledged."""
    t = f"TF{SUF}"
    p = producer([t])
    acked = []
    for i in range(3):
        body = f"more-{SUF}-{i:05d}-".ljust(4096, "y")
        r = p.send(msg(t, body))
        acked.append([body[:20], r.message_id])
    p.shutdown()
    return {"acked": acked}


# -- serve --workers 2: ENDPOINT is "<worker 0 address>;<worker 1 address>" --
def _pinned():
    """Per worker: a client configuration whose every call reaches that
    worker (its own port, ``--worker-ports``)."""
    return [ClientConfiguration(ep, Credentials()) for ep in EP.split(";")]


def _on(msg_, cfg):
    """Point a received message's next ack or invisibility change at another
    worker, as after its client reconnected there."""
    msg_.endpoints = cfg.rpc_endpoints
    return msg_


def _consumer_on(cfg, group, topic, await_s=1):
    c = SimpleConsumer(
        cfg, group, {topic: FilterExpression("*")}, await_duration=await_s
    )
    c.startup()
    return c


def s_w_share():
    """Two consumers of one group, one on each worker, drain 60 messages."""
    t, g = f"TWS{SUF}", f"GWS{SUF}"
    w0, w1 = _pinned()
    p = Producer(w0, (t,))
    p.startup()
    sent = [p.send(msg(t, f"s{i}")).message_id for i in range(60)]
    cs = [_consumer_on(w0, g, t), _consumer_on(w1, g, t)]
    got = [[], []]
    lock = threading.Lock()

    def run(i):
        end = time.time() + 30
        while time.time() < end:
            with lock:
                if len(got[0]) + len(got[1]) >= 60:
                    return
            for m in cs[i].receive(8, 20):
                cs[i].ack(m)
                with lock:
                    got[i].append(m.body.decode())

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    after = [len(c.receive(32, 20)) for c in cs]
    ids = [c.client_id for c in cs]
    time.sleep(1.2)  # clients.json is rewritten every 0.5 s
    for c in cs:
        c.shutdown()
    p.shutdown()
    return {"sent": len(sent), "got": got, "after": after, "client_ids": ids}


def s_w_handles():
    """A handle popped on one worker is renewed and acknowledged on the other;
    redeliveries count attempts whichever worker delivers them, and the
    third one (max attempts 3) goes to the dead letter queue."""
    t, g = f"TWH{SUF}", f"GWH{SUF}"
    w0, w1 = _pinned()
    p = Producer(w0, (t,))
    p.startup()
    c0, c1 = _consumer_on(w0, g, t), _consumer_on(w1, g, t)
    p.send(msg(t, "moved"))
    out = {}
    first = drain(c0, 1, ack=False, invisible=2)[0]  # worker 0, attempt 1
    out["first"] = [first.body.decode(), first.delivery_attempt]
    # On worker 1 while worker 0's handle is in flight: nothing to hand out.
    out["while_invisible"] = len(c1.receive(32, 2))
    again = drain(c1, 1, ack=False, invisible=2, timeout=10)[0]  # attempt 2
    out["again"] = [again.body.decode(), again.delivery_attempt]
    old = again.receipt_handle
    # Worker 0 changes the invisibility of worker 1's handle: a new handle.
    c0.change_invisible_duration(_on(again, w0), 5)
    out["handle_changed"] = again.receipt_handle != old
    new = again.receipt_handle
    again.receipt_handle = old
    try:
        c1.ack(_on(again, w1))
        out["stale"] = "OK"
    except Exception as e:  # noqa: BLE001
        out["stale"] = str(getattr(e, "code", "")) or str(e)[:100]
    again.receipt_handle = new
    c1.ack(_on(again, w1))  # acknowledged on worker 1
    out["after_ack"] = len(c0.receive(32, 20)) + len(c1.receive(32, 20))
    # Dead letters: three deliveries over both workers, never acknowledged.
    p.send(msg(t, "poison"))
    attempts = []
    for c in (c0, c1, c0):
        m = drain(c, 1, ack=False, invisible=1, timeout=10)
        attempts += [x.delivery_attempt for x in m]
    out["attempts"] = attempts
    time.sleep(1.2)  # visible again after its third delivery: the next
    out["after_dlq"] = len(c1.receive(32, 20))  # receive dead-letters it
    dlq = _consumer_on(w0, f"GWHD{SUF}", f"%DLQ%{g}")
    out["dlq"] = [m.body.decode() for m in drain(dlq, 1, timeout=15)]
    for c in (c0, c1, dlq):
        c.shutdown()
    p.shutdown()
    return out


def s_w_fifo():
    """Two consumers of one group, one on each worker, on two message groups:
    what one worker has in flight blocks its group on the other; then they
    take turns, each acknowledging what it received."""
    t, g = f"TWF{SUF}", f"GWF{SUF}"
    w0, w1 = _pinned()
    p = Producer(w0, (t,))
    p.startup()
    for i in range(6):
        for grp in ("g1", "g2"):
            p.send(msg(t, f"{grp}-{i}", group=grp))
    c0, c1 = _consumer_on(w0, g, t), _consumer_on(w1, g, t)
    out = {"order": [], "batches": []}

    def take(c, ack=True):
        batch = c.receive(32, 20)
        out["batches"].append([m.message_group for m in batch])
        out["order"] += [m.body.decode() for m in batch]
        if ack:
            for m in batch:
                c.ack(m)
        return batch

    first = take(c0, ack=False)  # worker 0: both groups' first messages
    out["first"] = sorted(m.body.decode() for m in first)
    out["blocked_on_1"] = [m.body.decode() for m in take(c1)]
    for m in first:
        if m.message_group == "g1":
            c0.ack(m)
    out["g1_next_on_1"] = [m.body.decode() for m in take(c1)]
    for m in first:
        if m.message_group == "g2":
            c0.ack(m)
    end = time.time() + 40
    turn = 0
    while len(out["order"]) < 12 and time.time() < end:
        take((c0, c1)[turn])
        turn ^= 1
    c0.shutdown()
    c1.shutdown()
    p.shutdown()
    return out


def s_w_tx():
    """A producer and its checker on worker 1; the check runs in worker 0."""
    t, g = f"TWX{SUF}", f"GWX{SUF}"
    _w0, w1 = _pinned()
    chk = Checker()
    p = Producer(w1, (t,), checker=chk)
    p.startup()
    c = _consumer_on(w1, g, t)
    tx = p.begin_transaction()
    p.send(msg(t, "checked"), tx)  # never resolved: the check-back commits it
    got = drain(c, 1, timeout=25)
    cid = p.client_id
    c.shutdown()
    p.shutdown()
    return {"got": [m.body.decode() for m in got], "checked": chk.seen, "id": cid}


def s_w_kill_a():
    """On worker 1: six messages received, three acknowledged."""
    t, g = f"TWK{SUF}", f"GWK{SUF}"
    _w0, w1 = _pinned()
    p = Producer(w1, (t,))
    p.startup()
    for i in range(6):
        p.send(msg(t, f"k{i}"))
    c = _consumer_on(w1, g, t)
    got = drain(c, 6, ack=False, invisible=4)
    for m in got[:3]:
        c.ack(m)
    c.shutdown()
    p.shutdown()
    bodies = [m.body.decode() for m in got]
    return {"acked": bodies[:3], "unacked": bodies[3:]}


def s_w_kill_b():
    """After worker 1 was killed and restarted: on each worker."""
    t, g = f"TWK{SUF}", f"GWK{SUF}"
    w0, w1 = _pinned()
    c = _consumer_on(w0, g, t)
    got = drain(c, 3, timeout=15)
    more = c.receive(32, 20)
    c.shutdown()
    p = Producer(w1, (t,))
    p.startup()
    p.send(msg(t, "after"))
    c1 = _consumer_on(w1, g, t)
    later = drain(c1, 1, timeout=10)
    c1.shutdown()
    p.shutdown()
    return {
        "got": sorted(m.body.decode() for m in got + more),
        "attempts": sorted(m.delivery_attempt for m in got + more),
        "later": [m.body.decode() for m in later],
    }


if __name__ == "__main__":
    res = globals()["s_" + sys.argv[1]]()
    print("RESULT " + json.dumps(res), flush=True)
    sys.stdout.flush()
    import os

    os._exit(0)
