"""Conformance runner with the official Python client (rocketmq-python-client).

    python runner.py INPUT.json OUTPUT.json

Performs every scenario of INPUT (tests/conformance/README.md) and writes what
it observed. Each scenario runs in a thread with a deadline; whatever it
started is shut down before the next one.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import traceback
from importlib.metadata import version

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    LitePushConsumer,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

logging.disable(logging.CRITICAL)

INP = json.loads(open(sys.argv[1]).read())
EP = INP["endpoint"]
SCENARIO_S = 90


def cfg(ns: str = "") -> ClientConfiguration:
    return ClientConfiguration(
        EP, Credentials("", ""), namespace=ns, request_timeout=10
    )


def now_ms() -> int:
    return int(time.time() * 1000)


class Closer:
    """Every client a scenario starts, shut down at its end."""

    def __init__(self) -> None:
        self.items: list = []

    def add(self, c):
        self.items.append(c)
        return c

    def close(self) -> None:
        for c in reversed(self.items):
            try:
                c.shutdown()
            except Exception:  # noqa: BLE001
                pass
        self.items.clear()


def outcome(fn) -> dict:
    try:
        fn()
        return {"outcome": "ok", "code": None, "side": None, "message": ""}
    except Exception as exc:  # noqa: BLE001
        code = getattr(exc, "code", None)
        if callable(code):
            code = code()
        try:
            code = int(code) if code is not None else None
        except (TypeError, ValueError):
            code = None
        return {
            "outcome": "error",
            "code": code,
            "side": "server" if code is not None else "client",
            "message": f"{type(exc).__name__}: {exc}"[:300],
        }


def msg(
    topic,
    body,
    tag=None,
    keys=None,
    props=None,
    group=None,
    at=None,
    priority=None,
    lite=None,
):
    m = Message()
    m.topic = topic
    m.body = body.encode() if isinstance(body, str) else body
    if tag:
        m.tag = tag
    if keys:
        Message.keys.fset(m, *keys)  # the setter takes several keys this way
    for k, v in (props or {}).items():
        m.add_property(k, v)
    if group:
        m.message_group = group
    if at:
        m.delivery_timestamp = at
    if priority is not None:
        m.priority = priority
    if lite:
        m.lite_topic = lite
    return m


def producer(cl: Closer, topics, checker=None, ns="") -> Producer:
    p = (
        Producer(cfg(ns), tuple(topics), checker)
        if checker
        else Producer(cfg(ns), tuple(topics))
    )
    cl.add(p)
    p.startup()
    return p


def simple(cl: Closer, group, topic, expr=None, ns="") -> SimpleConsumer:
    c = SimpleConsumer(cfg(ns), group, {topic: expr or FilterExpression("*")}, 2)
    cl.add(c)
    c.startup()
    return c


def receive_for(c, seconds, want=None, invisible=20, ack=True):
    out = []
    end = time.time() + seconds
    while time.time() < end and (want is None or len(out) < want):
        try:
            got = c.receive(16, invisible)
        except Exception:  # noqa: BLE001 - an empty long poll raises in some versions
            got = []
        for m in got or []:
            out.append((now_ms(), m))
            if ack:
                c.ack(m)
    return out


def first_of(got, what="the message"):
    """The one message a scenario needs; an error (not an observation) when
    it never came."""
    if not got:
        raise RuntimeError(f"{what} never arrived")
    return got[0][1]


def body(m) -> str:
    return bytes(m.body).decode(errors="replace")


# -- scenarios ------------------------------------------------------------------
def s_send_receive(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    c = simple(cl, g, t)
    pr = producer(cl, [t])
    ids = []
    for i in range(p["count"]):
        r = pr.send(
            msg(
                t,
                f"m{i}",
                tag=p["tag"],
                keys=[f"k-{i}", f"x-{i}"],
                props={"p1": f"v{i}", "p2": "x"},
            )
        )
        ids.append(r.message_id)
    got = [m for _, m in receive_for(c, 15, p["count"])]
    msgs = sorted(
        (
            {
                "body": body(m),
                "tag": m.tag,
                "keys": sorted(m.keys or []),
                "properties": dict(m.properties or {}),
                "topic": m.topic,
                "delivery_attempt": m.delivery_attempt,
                "message_group": m.message_group,
            }
            for m in got
        ),
        key=lambda x: x["body"],
    )
    return {
        "send_ok": len(ids),
        "messages": msgs,
        "ids_unique": len(set(ids)) == len(ids)
        and sorted(ids) == sorted(m.message_id for m in got),
    }


def s_tag_filter(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    c = simple(cl, g, t, FilterExpression(p["expression"]))
    pr = producer(cl, [t])
    for i, tag in enumerate(p["tags"]):
        pr.send(msg(t, f"{i}-{tag}", tag=tag))
    return {"bodies": sorted(body(m) for _, m in receive_for(c, 6))}


def s_sql_filter(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    c = simple(cl, g, t, FilterExpression(p["expression"], _sql_type()))
    pr = producer(cl, [t])
    for i in range(p["count"]):
        pr.send(msg(t, f"s{i}", tag="A" if i % 2 else "B", props={"n": str(i)}))
    return {"bodies": sorted(body(m) for _, m in receive_for(c, 6))}


def _sql_type():
    from rocketmq.grpc_protocol import FilterType

    return FilterType.SQL


def s_sql_filter_malformed(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]

    def go():
        c = simple(cl, g, t, FilterExpression(p["expression"], _sql_type()))
        c.receive(16, 20)

    return outcome(go)


def s_fifo_order(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    c = simple(cl, g, t)
    pr = producer(cl, [t])
    n, per = p["groups"], p["per_group"]
    for i in range(per):
        for j in range(n):
            pr.send(msg(t, f"g{j}-{i}", group=f"g{j}"))
    got = receive_for(c, 30, n * per)
    order: dict[str, list[int]] = {}
    for _, m in got:
        grp, _, i = body(m).partition("-")
        order.setdefault(grp, []).append(int(i))
    return {
        "received": len(got),
        "order_kept": {k: v == sorted(v) for k, v in sorted(order.items())},
        "message_groups": sorted({m.message_group or "" for _, m in got}),
    }


def s_fifo_redelivery(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    n = p["count"]
    a = simple(cl, g, t)
    pr = producer(cl, [t])
    for i in range(n):
        pr.send(msg(t, f"f{i}", group="m"))
    # A: one batch (the first receive that returns something), never acked.
    first = receive_for(a, 15, 1, invisible=p["invisible_ms"] // 1000, ack=False)
    a_at = first[0][0] if first else None
    # A dies: shut it down (and forget it, so that the scenario's end does not again).
    a.shutdown()
    cl.items.remove(a)
    b = simple(cl, g, t)
    got = []
    end = time.time() + 25
    while time.time() < end and len({body(m) for _, m in got}) < n:
        try:
            batch = b.receive(16, 20)
        except Exception:  # noqa: BLE001 - an empty long poll raises in some versions
            batch = []
        for m in batch or []:
            got.append((now_ms(), m))
            b.ack(m)
    return {
        "a_bodies": [body(m) for _, m in first],
        "b_bodies": [body(m) for _, m in got],
        "b_attempts": [m.delivery_attempt for _, m in got],
        "redelivered_after_ms": got[0][0] - a_at if got and a_at is not None else None,
    }


def s_delay_timestamp(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    c = simple(cl, g, t)
    pr = producer(cl, [t])
    due = {}
    for i, d in enumerate(p["delays_ms"]):
        due[f"d{i}"] = now_ms() + d
        pr.send(msg(t, f"d{i}", at=due[f"d{i}"]))
    got = {body(m): at for at, m in receive_for(c, 20, len(due))}
    return {
        "received": len(got),
        "lateness_ms": [got[k] - due[k] if k in got else None for k in sorted(due)],
    }


def s_delay_too_far(sc, cl):
    t, p = sc["topics"]["t"], sc["params"]
    pr = producer(cl, [t])
    return outcome(lambda: pr.send(msg(t, "far", at=now_ms() + p["delay_ms"])))


class Checker(TransactionChecker):
    def __init__(self, answers):
        self.answers = answers
        self.calls: list[int] = []

    def check(self, message):
        self.calls.append(now_ms())
        a = self.answers[min(len(self.calls) - 1, len(self.answers) - 1)]
        return getattr(TransactionResolution, a)


def _tx(sc, cl, end):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    c = simple(cl, g, t)
    ck = Checker(p.get("answers", ["COMMIT"]))
    pr = producer(cl, [t], ck)
    tx = pr.begin_transaction()
    pr.send(msg(t, "c"), tx)
    sent = now_ms()
    if end == "commit":
        tx.commit()
        got = receive_for(c, 6)
    elif end == "rollback":
        tx.rollback()
        got = receive_for(c, p.get("wait_ms", 6000) / 1000)
    elif p["answers"][-1] == "COMMIT":
        got = receive_for(c, 25, 1)
        got += receive_for(c, p.get("wait_ms", 2000) / 1000)
    else:
        # Nothing should arrive: wait for the checks instead, then watch.
        until = time.time() + 25
        while time.time() < until and len(ck.calls) < len(p["answers"]):
            time.sleep(0.1)
        got = receive_for(c, p.get("wait_ms", 2000) / 1000)
    out = {"received": len(got), "checks": len(ck.calls)}
    if end == "check":
        out["first_check_ms"] = ck.calls[0] - sent if ck.calls else None
        calls = ck.calls
        out["check_gaps_ms"] = [b - a for a, b in zip(calls, calls[1:], strict=False)]
    return out


def s_tx_commit(sc, cl):
    return _tx(sc, cl, "commit")


def s_tx_rollback(sc, cl):
    return _tx(sc, cl, "rollback")


def s_tx_check(sc, cl):
    return _tx(sc, cl, "check")


def s_invisible_redelivery(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    c = simple(cl, g, t)
    pr = producer(cl, [t])
    pr.send(msg(t, "r"))
    first = receive_for(c, 15, 1, invisible=p["invisible_ms"] // 1000, ack=False)
    attempts = [m.delivery_attempt for _, m in first]
    again = receive_for(c, 15, 1)
    attempts += [m.delivery_attempt for _, m in again]
    return {
        "attempts": attempts,
        "redelivered_after_ms": again[0][0] - first[0][0] if first and again else None,
    }


def s_change_invisible(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    c = simple(cl, g, t)
    pr = producer(cl, [t])
    pr.send(msg(t, "ci"))
    first = receive_for(c, 15, 1, invisible=p["invisible_ms"] // 1000, ack=False)
    m = first_of(first)
    c.change_invisible_duration(m, p["changed_ms"] // 1000)
    early = receive_for(c, p["watch_ms"] / 1000, 1, ack=False)
    ok = outcome(lambda: c.ack(m))["outcome"] == "ok"
    return {"redelivered_early": bool(early), "ack_ok": ok}


def s_ack_stale_handle(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    c = simple(cl, g, t)
    pr = producer(cl, [t])
    pr.send(msg(t, "st"))
    first = receive_for(c, 15, 1, invisible=p["invisible_ms"] // 1000, ack=False)
    stale = first_of(first)
    again = receive_for(c, 15, 1, ack=False)
    first_of(again, "the redelivery")
    res = outcome(lambda: c.ack(stale))
    if again:
        outcome(lambda: c.ack(again[0][1]))
    return res


class Recorder(MessageListener):
    def __init__(self, result=ConsumeResult.SUCCESS):
        self.result = result
        self.seen: list[tuple[int, str, int]] = []

    def consume(self, message):
        self.seen.append((now_ms(), body(message), message.delivery_attempt))
        return self.result


def s_push_consumer(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    rec = Recorder()
    pc = cl.add(PushConsumer(cfg(), g, rec, {t: FilterExpression("*")}))
    pc.startup()
    pr = producer(cl, [t])
    for i in range(p["count"]):
        pr.send(msg(t, f"p{i}"))
    end = time.time() + 15
    while time.time() < end and len({b for _, b, _ in rec.seen}) < p["count"]:
        time.sleep(0.1)
    time.sleep(p["watch_ms"] / 1000)
    return {"bodies": sorted({b for _, b, _ in rec.seen}), "deliveries": len(rec.seen)}


def s_push_retry_dlq(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    rec = Recorder(ConsumeResult.FAILURE)
    pc = cl.add(PushConsumer(cfg(), g, rec, {t: FilterExpression("*")}))
    pc.startup()
    pr = producer(cl, [t])
    start = time.time()
    pr.send(msg(t, "x"))
    end = start + p["watch_ms"] / 1000
    want = sc["timing"]["max_delivery_attempts"]
    last, n = time.time(), 0
    while time.time() < end:
        if len(rec.seen) != n:
            n, last = len(rec.seen), time.time()
        elif n >= want and time.time() - last > 3:
            break  # an attempt beyond the limit would have come by now
        time.sleep(0.2)
    pc.shutdown()
    seen = list(rec.seen)
    dlq = f"%DLQ%{g}"
    c = simple(cl, g + "-dlq", dlq)
    # Apache moves the message after its last invisible time runs out, up to
    # ~30 s after the last attempt: read until the scenario's time is up.
    got = [body(m) for _, m in receive_for(c, max(15, start + 85 - time.time()), 1)]
    return {
        "attempts": [a for _, _, a in seen],
        "retry_gap_ms": seen[1][0] - seen[0][0] if len(seen) > 1 else None,
        "dlq_topic": "%DLQ%g" if got else None,
        "dlq_bodies": sorted(got),
    }


def s_bad_input(sc, cl):
    t = sc["topics"]["t"]
    pr = producer(cl, [t])
    cases = {
        "reserved_property": lambda: pr.send(msg(t, "r", props={"UNIQ_KEY": "x"})),
        "body_5mib": lambda: pr.send(msg(t, b"x" * (5 * 1024 * 1024))),
        "bad_topic_name": lambda: pr.send(msg("bad topic!", "b")),
        "missing_topic": lambda: pr.send(msg(f"{t}-missing", "m")),
        "bad_tag": lambda: pr.send(msg(t, "t", tag="a|b")),
    }
    return {"cases": {k: outcome(cases[k]) for k in sc["params"]["cases"]}}


def s_namespace_isolation(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    cons = {ns: simple(cl, g, t, ns=ns) for ns in p["namespaces"]}
    for ns in p["namespaces"]:
        producer(cl, [t], ns=ns).send(msg(t, f"ns-{ns or 'none'}"))
    out = {}
    for ns, c in cons.items():
        out[ns] = sorted(body(m) for _, m in receive_for(c, 6))
    return {"received": out}


def s_message_type_mismatch(sc, cl):
    tp = sc["topics"]
    pr = producer(cl, [tp["normal"], tp["fifo"], tp["tx"]], Checker(["ROLLBACK"]))

    def tx_send():
        tx = pr.begin_transaction()
        pr.send(msg(tp["normal"], "tx"), tx)
        tx.commit()

    cases = {
        "fifo_to_normal": lambda: pr.send(msg(tp["normal"], "f", group="g1")),
        "tx_to_normal": tx_send,
        "delay_to_normal": lambda: pr.send(msg(tp["normal"], "d", at=now_ms() + 1000)),
        "normal_to_fifo": lambda: pr.send(msg(tp["fifo"], "n")),
        "normal_to_tx": lambda: pr.send(msg(tp["tx"], "n")),
    }
    return {"cases": {k: outcome(cases[k]) for k in sc["params"]["cases"]}}


def s_priority(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    pr = producer(cl, [t])
    first = None
    for pri in p["priorities"]:
        res = outcome(lambda pri=pri: pr.send(msg(t, f"pr{pri}", priority=pri)))
        first = first or res
        if res["outcome"] != "ok":
            break
    c = simple(cl, g, t)
    got = receive_for(c, 6)
    return {
        "send_outcome": first,
        "received_priorities": [int(body(m)[2:]) for _, m in got],
    }


def s_lite(sc, cl):
    t, g, p = sc["topics"]["t"], sc["groups"]["g"], sc["params"]
    rec = Recorder()
    started = outcome(lambda: _lite_consumer(cl, g, t, rec, p["lite_topic"]))
    pr = producer(cl, [t])
    sent = outcome(lambda: pr.send(msg(t, "lite", lite=p["lite_topic"])))
    time.sleep(8)
    return {
        "send_outcome": sent,
        "received": len(rec.seen),
        "consumer_outcome": started,
    }


def _lite_consumer(cl, g, t, rec, lite):
    lc = cl.add(LitePushConsumer(cfg(), g, t, rec))
    lc.startup()
    lc.subscribe_lite(lite)


RUN = {
    "tx_check_commit": s_tx_check,
    "tx_check_rollback": s_tx_check,
    "tx_check_unknown": s_tx_check,
}


def run_one(sc) -> dict:
    fn = RUN.get(sc["id"]) or globals().get(f"s_{sc['id']}")
    if fn is None:
        return {"status": "error", "error": "no such scenario in this runner"}
    box: dict = {}
    cl = Closer()

    def target():
        try:
            box["observed"] = fn(sc, cl)
        except Exception as exc:  # noqa: BLE001
            box["error"] = f"{type(exc).__name__}: {exc}"
            box["trace"] = traceback.format_exc()[-1500:]

    t0 = time.time()
    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(SCENARIO_S)
    cl.close()
    elapsed = int((time.time() - t0) * 1000)
    if th.is_alive():
        return {
            "status": "error",
            "error": f"timed out after {SCENARIO_S} s",
            "elapsed_ms": elapsed,
        }
    if "error" in box:
        return {
            "status": "error",
            "error": box["error"],
            "trace": box["trace"],
            "elapsed_ms": elapsed,
        }
    return {"status": "ok", "observed": box["observed"], "elapsed_ms": elapsed}


def main() -> None:
    results = {}
    for sc in INP["scenarios"]:
        results[sc["id"]] = run_one(sc)
        print(sc["id"], results[sc["id"]]["status"], flush=True)
    out = {
        "client": {
            "language": "python",
            "library": "rocketmq-python-client",
            "version": version("rocketmq-python-client"),
        },
        "results": results,
    }
    with open(sys.argv[2], "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    sys.stdout.flush()
    import os

    os._exit(0)  # the client's threads would keep the interpreter alive


if __name__ == "__main__":
    main()
