package conformance;

import static conformance.Runner.DEFAULT_INVISIBLE;
import static conformance.Runner.errorOutcome;
import static conformance.Runner.msBetween;
import static conformance.Runner.okOutcome;
import static conformance.Runner.outcomeOf;
import static conformance.Runner.receive;
import static conformance.Runner.receiveFor;

import conformance.Runner.Got;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.LitePushConsumer;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionChecker;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/** The scenarios of tests/conformance/scenarios.json, one method each (see the README's table). */
final class Scenarios {
    static final Map<String, Runner.Scenario> ALL = new LinkedHashMap<>();

    static {
        ALL.put("send_receive", Scenarios::sendReceive);
        ALL.put("tag_filter", Scenarios::tagFilter);
        ALL.put("sql_filter", Scenarios::sqlFilter);
        ALL.put("sql_filter_malformed", Scenarios::sqlFilterMalformed);
        ALL.put("fifo_order", Scenarios::fifoOrder);
        ALL.put("fifo_redelivery", Scenarios::fifoRedelivery);
        ALL.put("delay_timestamp", Scenarios::delayTimestamp);
        ALL.put("delay_too_far", Scenarios::delayTooFar);
        ALL.put("tx_commit", ctx -> txEnd(ctx, true));
        ALL.put("tx_rollback", ctx -> txEnd(ctx, false));
        ALL.put("tx_check_commit", Scenarios::txCheck);
        ALL.put("tx_check_rollback", Scenarios::txCheck);
        ALL.put("tx_check_unknown", Scenarios::txCheck);
        ALL.put("invisible_redelivery", Scenarios::invisibleRedelivery);
        ALL.put("change_invisible", Scenarios::changeInvisible);
        ALL.put("ack_stale_handle", Scenarios::ackStaleHandle);
        ALL.put("push_consumer", Scenarios::pushConsumer);
        ALL.put("push_retry_dlq", Scenarios::pushRetryDlq);
        ALL.put("bad_input", Scenarios::badInput);
        ALL.put("namespace_isolation", Scenarios::namespaceIsolation);
        ALL.put("message_type_mismatch", Scenarios::messageTypeMismatch);
        ALL.put("priority", Scenarios::priority);
        ALL.put("lite", Scenarios::lite);
    }

    private Scenarios() {
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String body(MessageView view) {
        ByteBuffer b = view.getBody().duplicate();
        byte[] bytes = new byte[b.remaining()];
        b.get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    static List<String> sortedBodies(List<Got> got) {
        List<String> bodies = new ArrayList<>();
        for (Got g : got) {
            bodies.add(g.body());
        }
        Collections.sort(bodies);
        return bodies;
    }

    static Map<String, Object> observed(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    // ---------------------------------------------------------------- plain messaging

    static Map<String, Object> sendReceive(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        int count = ctx.intParam("count", 5);
        String tag = ctx.textParam("tag", "TagA");
        SimpleConsumer consumer = ctx.simple(null, ctx.group("g"), t, FilterExpression.SUB_ALL);
        Producer producer = ctx.producer(null, null, t);

        int sendOk = 0;
        List<String> sentIds = new ArrayList<>();
        List<Object> sendErrors = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            MessageBuilder b = ctx.message(t, "m" + i).setTag(tag).setKeys("k-" + i, "x-" + i)
                .addProperty("p1", "v" + i).addProperty("p2", "x");
            try {
                SendReceipt r = producer.send(b.build());
                sendOk++;
                sentIds.add(r.getMessageId().toString());
            } catch (Exception e) {
                sendErrors.add(errorOutcome(e));
            }
        }
        List<Got> got = receive(consumer, count, 15_000, DEFAULT_INVISIBLE, true, null);

        List<Map<String, Object>> messages = new ArrayList<>();
        Set<String> receivedIds = new HashSet<>();
        for (Got g : got) {
            MessageView v = g.view;
            receivedIds.add(g.id());
            List<String> keys = new ArrayList<>(v.getKeys());
            Collections.sort(keys);
            messages.add(observed(
                "body", g.body(),
                "tag", v.getTag().orElse(null),
                "keys", keys,
                "properties", new TreeMap<>(v.getProperties()),
                "topic", v.getTopic(),
                "delivery_attempt", v.getDeliveryAttempt(),
                "message_group", v.getMessageGroup().orElse(null)));
        }
        messages.sort((a, b) -> ((String) a.get("body")).compareTo((String) b.get("body")));
        Set<String> sentSet = new HashSet<>(sentIds);
        boolean idsUnique = sentSet.size() == sentIds.size() && sentSet.equals(receivedIds);
        Map<String, Object> obs = observed("send_ok", sendOk, "messages", messages, "ids_unique", idsUnique);
        if (!sendErrors.isEmpty()) {
            obs.put("send_errors", sendErrors);
        }
        return obs;
    }

    static Map<String, Object> tagFilter(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        FilterExpression filter = new FilterExpression(ctx.textParam("expression", "*"), FilterExpressionType.TAG);
        SimpleConsumer consumer = ctx.simple(null, ctx.group("g"), t, filter);
        Producer producer = ctx.producer(null, null, t);
        List<String> tags = ctx.listParam("tags");
        for (int i = 0; i < tags.size(); i++) {
            producer.send(ctx.message(t, i + "-" + tags.get(i)).setTag(tags.get(i)).build());
        }
        return observed("bodies", sortedBodies(receiveFor(consumer, 6_000)));
    }

    static Map<String, Object> sqlFilter(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        FilterExpression filter = new FilterExpression(ctx.textParam("expression", "TRUE"), FilterExpressionType.SQL92);
        SimpleConsumer consumer = ctx.simple(null, ctx.group("g"), t, filter);
        Producer producer = ctx.producer(null, null, t);
        int count = ctx.intParam("count", 6);
        for (int i = 0; i < count; i++) {
            producer.send(ctx.message(t, "s" + i).addProperty("n", Integer.toString(i))
                .setTag(i % 2 == 1 ? "A" : "B").build());
        }
        return observed("bodies", sortedBodies(receiveFor(consumer, 6_000)));
    }

    static Map<String, Object> sqlFilterMalformed(Ctx ctx) {
        String t = ctx.topic("t");
        String group = ctx.group("g");
        FilterExpression filter = new FilterExpression(ctx.textParam("expression", "n >"), FilterExpressionType.SQL92);
        return outcomeOf(() -> {
            SimpleConsumer consumer = ctx.simple(null, group, t, filter);
            for (MessageView v : consumer.receive(Runner.BATCH, DEFAULT_INVISIBLE)) {
                consumer.ack(v);
            }
        });
    }

    static Map<String, Object> fifoOrder(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        int groups = ctx.intParam("groups", 3);
        int perGroup = ctx.intParam("per_group", 8);
        SimpleConsumer consumer = ctx.simple(null, ctx.group("g"), t, FilterExpression.SUB_ALL);
        Producer producer = ctx.producer(null, null, t);
        for (int i = 0; i < perGroup; i++) {
            for (int j = 0; j < groups; j++) {
                producer.send(ctx.message(t, "g" + j + "-" + i).setMessageGroup("g" + j).build());
            }
        }
        List<Got> got = receive(consumer, groups * perGroup, 30_000, DEFAULT_INVISIBLE, true, null);

        // Per group: the sequence numbers in arrival order; kept when strictly increasing
        // (no reordering, no duplicate) and not empty.
        Map<String, List<Integer>> arrivals = new TreeMap<>();
        for (int j = 0; j < groups; j++) {
            arrivals.put("g" + j, new ArrayList<>());
        }
        Set<String> messageGroups = new TreeSet<>();
        for (Got g : got) {
            g.view.getMessageGroup().ifPresent(messageGroups::add);
            String[] parts = g.body().split("-", 2);
            if (parts.length == 2) {
                arrivals.computeIfAbsent(parts[0], k -> new ArrayList<>()).add(Integer.parseInt(parts[1]));
            }
        }
        Map<String, Object> orderKept = new TreeMap<>();
        for (Map.Entry<String, List<Integer>> e : arrivals.entrySet()) {
            List<Integer> seq = e.getValue();
            boolean kept = !seq.isEmpty();
            for (int k = 1; k < seq.size(); k++) {
                kept &= seq.get(k) > seq.get(k - 1);
            }
            orderKept.put(e.getKey(), kept);
        }
        return observed("received", got.size(), "order_kept", orderKept,
            "message_groups", new ArrayList<>(messageGroups));
    }

    static Map<String, Object> fifoRedelivery(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        String g = ctx.group("g");
        int count = ctx.intParam("count", 4);
        Duration invisible = Duration.ofMillis(ctx.longParam("invisible_ms", 3_000));
        SimpleConsumer a = ctx.simple(null, g, t, FilterExpression.SUB_ALL);
        Producer producer = ctx.producer(null, null, t);
        for (int i = 0; i < count; i++) {
            producer.send(ctx.message(t, "f" + i).setMessageGroup("m").build());
        }
        // A: one batch (the first receive that returns something), never acked; then A dies.
        List<Got> first = receive(a, 1, 15_000, invisible, false, null);
        ctx.closeNow(a);
        SimpleConsumer b = ctx.simple(null, g, t, FilterExpression.SUB_ALL);
        List<Got> got = new ArrayList<>();
        Set<String> distinct = new HashSet<>();
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(25_000);
        while (distinct.size() < count && System.nanoTime() < deadline) {
            if (Thread.currentThread().isInterrupted()) {
                throw new InterruptedException("scenario stopped");
            }
            List<MessageView> batch = b.receive(16, DEFAULT_INVISIBLE);
            long wall = System.currentTimeMillis();
            long mono = System.nanoTime();
            for (MessageView view : batch) {
                Got one = new Got(view, wall, mono);
                got.add(one);
                distinct.add(one.body());
                b.ack(view);
            }
        }
        List<String> aBodies = new ArrayList<>();
        for (Got x : first) {
            aBodies.add(x.body());
        }
        List<String> bBodies = new ArrayList<>();
        List<Integer> bAttempts = new ArrayList<>();
        for (Got x : got) {
            bBodies.add(x.body());
            bAttempts.add(x.view.getDeliveryAttempt());
        }
        Long after = first.isEmpty() || got.isEmpty() ? null : msBetween(first.get(0).monoNs, got.get(0).monoNs);
        return observed("a_bodies", aBodies, "b_bodies", bBodies, "b_attempts", bAttempts,
            "redelivered_after_ms", after);
    }

    // ---------------------------------------------------------------- delay

    static Map<String, Object> delayTimestamp(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        List<String> delays = ctx.listParam("delays_ms");
        SimpleConsumer consumer = ctx.simple(null, ctx.group("g"), t, FilterExpression.SUB_ALL);
        Producer producer = ctx.producer(null, null, t);
        Map<String, Long> due = new LinkedHashMap<>();
        for (int i = 0; i < delays.size(); i++) {
            long at = System.currentTimeMillis() + Long.parseLong(delays.get(i));
            producer.send(ctx.message(t, "d" + i).setDeliveryTimestamp(at).build());
            due.put("d" + i, at);
        }
        List<Got> got = receive(consumer, delays.size(), 20_000, DEFAULT_INVISIBLE, true, null);
        Map<String, Long> arrival = new LinkedHashMap<>();
        for (Got g : got) {
            arrival.putIfAbsent(g.body(), g.wallMs);
        }
        List<Long> lateness = new ArrayList<>();
        for (Map.Entry<String, Long> e : due.entrySet()) {
            Long a = arrival.get(e.getKey());
            lateness.add(a == null ? null : a - e.getValue());
        }
        return observed("received", got.size(), "lateness_ms", lateness);
    }

    static Map<String, Object> delayTooFar(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        long delay = ctx.longParam("delay_ms", 2_592_000_000L);
        Producer producer = ctx.producer(null, null, t);
        return outcomeOf(() -> producer.send(
            ctx.message(t, "far").setDeliveryTimestamp(System.currentTimeMillis() + delay).build()));
    }

    // ---------------------------------------------------------------- transactions

    /** Answers answers[k] to its k-th call (the last one after the list ends); records call times. */
    static final class Checker implements TransactionChecker {
        final List<String> answers;
        final List<Long> callsNs = new CopyOnWriteArrayList<>();

        Checker(List<String> answers) {
            this.answers = answers.isEmpty() ? List.of("COMMIT") : answers;
        }

        @Override
        public synchronized TransactionResolution check(MessageView view) {
            int k = callsNs.size();
            callsNs.add(System.nanoTime());
            return TransactionResolution.valueOf(answers.get(Math.min(k, answers.size() - 1)));
        }
    }

    static Map<String, Object> txEnd(Ctx ctx, boolean commit) throws Exception {
        String t = ctx.topic("t");
        SimpleConsumer consumer = ctx.simple(null, ctx.group("g"), t, FilterExpression.SUB_ALL);
        Checker checker = new Checker(List.of("COMMIT"));
        Producer producer = ctx.producer(null, checker, t);
        Transaction tx = producer.beginTransaction();
        producer.send(ctx.message(t, "c").build(), tx);
        if (commit) {
            tx.commit();
        } else {
            tx.rollback();
        }
        long wait = commit ? 6_000 : ctx.longParam("wait_ms", 6_000);
        List<Got> got = receiveFor(consumer, wait);
        return observed("received", got.size(), "checks", checker.callsNs.size());
    }

    static Map<String, Object> txCheck(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        SimpleConsumer consumer = ctx.simple(null, ctx.group("g"), t, FilterExpression.SUB_ALL);
        Checker checker = new Checker(ctx.listParam("answers"));
        Producer producer = ctx.producer(null, checker, t);
        Transaction tx = producer.beginTransaction();
        producer.send(ctx.message(t, "u").build(), tx);
        long sentNs = System.nanoTime();
        // Neither commit nor rollback: the broker has to ask the checker.
        List<Got> got = new ArrayList<>(receive(consumer, 1, 25_000, DEFAULT_INVISIBLE, true, null));
        got.addAll(receiveFor(consumer, ctx.longParam("wait_ms", 2_000)));

        List<Long> calls = new ArrayList<>(checker.callsNs);
        List<Long> gaps = new ArrayList<>();
        for (int k = 1; k < calls.size(); k++) {
            gaps.add(msBetween(calls.get(k - 1), calls.get(k)));
        }
        return observed("received", got.size(), "checks", calls.size(),
            "first_check_ms", calls.isEmpty() ? null : msBetween(sentNs, calls.get(0)),
            "check_gaps_ms", gaps);
    }

    // ---------------------------------------------------------------- invisibility and acks

    /** Sends one message and receives it (not acked) with the given invisible duration. */
    static Got sendAndReceiveOnce(Ctx ctx, SimpleConsumer consumer, String t, String body, Duration invisible)
        throws Exception {
        Producer producer = ctx.producer(null, null, t);
        String id = producer.send(ctx.message(t, body).build()).getMessageId().toString();
        List<Got> got = receive(consumer, 1, 15_000, invisible, false, v -> v.getMessageId().toString().equals(id));
        for (Got g : got) {
            if (g.id().equals(id)) {
                return g;
            }
        }
        throw new IllegalStateException("the message sent was not received within 15 s");
    }

    /** Receives (invisible 20 s, no ack) until the message `id` comes again or `ms` pass. */
    static Got waitForAgain(SimpleConsumer consumer, String id, long ms) throws Exception {
        for (Got g : receive(consumer, 1, ms, DEFAULT_INVISIBLE, false, v -> v.getMessageId().toString().equals(id))) {
            if (g.id().equals(id)) {
                return g;
            }
        }
        return null;
    }

    static Map<String, Object> invisibleRedelivery(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        SimpleConsumer consumer = ctx.simple(null, ctx.group("g"), t, FilterExpression.SUB_ALL);
        Duration invisible = Duration.ofMillis(ctx.longParam("invisible_ms", 3_000));
        Got first = sendAndReceiveOnce(ctx, consumer, t, "r", invisible);
        Got again = waitForAgain(consumer, first.id(), 15_000);
        List<Integer> attempts = new ArrayList<>(List.of(first.view.getDeliveryAttempt()));
        Long after = null;
        if (again != null) {
            attempts.add(again.view.getDeliveryAttempt());
            after = msBetween(first.monoNs, again.monoNs);
            consumer.ack(again.view);
        }
        return observed("attempts", attempts, "redelivered_after_ms", after);
    }

    static Map<String, Object> changeInvisible(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        SimpleConsumer consumer = ctx.simple(null, ctx.group("g"), t, FilterExpression.SUB_ALL);
        Duration invisible = Duration.ofMillis(ctx.longParam("invisible_ms", 4_000));
        Got first = sendAndReceiveOnce(ctx, consumer, t, "ci", invisible);
        // The Java client stores the receipt handle the change returns in the MessageView itself.
        consumer.changeInvisibleDuration(first.view, Duration.ofMillis(ctx.longParam("changed_ms", 10_000)));
        Got early = waitForAgain(consumer, first.id(), ctx.longParam("watch_ms", 6_000));
        Map<String, Object> ack = outcomeOf(() -> consumer.ack(first.view));
        return observed("redelivered_early", early != null, "ack_ok", "ok".equals(ack.get("outcome")),
            "ack_outcome", ack);
    }

    static Map<String, Object> ackStaleHandle(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        SimpleConsumer consumer = ctx.simple(null, ctx.group("g"), t, FilterExpression.SUB_ALL);
        Duration invisible = Duration.ofMillis(ctx.longParam("invisible_ms", 2_000));
        Got first = sendAndReceiveOnce(ctx, consumer, t, "stale", invisible);
        Got second = waitForAgain(consumer, first.id(), 15_000);
        Map<String, Object> obs = outcomeOf(() -> consumer.ack(first.view));
        obs.put("redelivered", second != null);
        if (second != null) {
            obs.put("second_ack_ok", "ok".equals(outcomeOf(() -> consumer.ack(second.view)).get("outcome")));
        }
        return obs;
    }

    // ---------------------------------------------------------------- push consumers

    static Map<String, Object> pushConsumer(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        int count = ctx.intParam("count", 5);
        List<String> bodies = new CopyOnWriteArrayList<>();
        ctx.push(ctx.group("g"), t, FilterExpression.SUB_ALL, v -> {
            bodies.add(body(v));
            return ConsumeResult.SUCCESS;
        });
        Producer producer = ctx.producer(null, null, t);
        for (int i = 0; i < count; i++) {
            producer.send(ctx.message(t, "p" + i).build());
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        while (new HashSet<>(bodies).size() < count && System.nanoTime() < deadline) {
            Thread.sleep(100);
        }
        Thread.sleep(ctx.longParam("watch_ms", 3_000));
        List<String> snapshot = new ArrayList<>(bodies);
        return observed("bodies", new ArrayList<>(new TreeSet<>(snapshot)), "deliveries", snapshot.size());
    }

    static Map<String, Object> pushRetryDlq(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        String g = ctx.group("g");
        List<long[]> attempts = new CopyOnWriteArrayList<>(); // {monoNs, deliveryAttempt}
        PushConsumer push = ctx.push(g, t, FilterExpression.SUB_ALL, v -> {
            attempts.add(new long[] {System.nanoTime(), v.getDeliveryAttempt()});
            return ConsumeResult.FAILURE;
        });
        Producer producer = ctx.producer(null, null, t);
        producer.send(ctx.message(t, "x").build());
        long start = System.nanoTime();
        long watchNs = TimeUnit.MILLISECONDS.toNanos(ctx.longParam("watch_ms", 40_000));
        long quietNs = TimeUnit.SECONDS.toNanos(3);
        // Until the group's allowed attempts (timing.max_delivery_attempts) were seen and no
        // further one came for 3 s (Apache retries ~20 s after the first attempt), or watch_ms
        // after the send.
        int allowed = Math.max(1, ctx.timingInt("max_delivery_attempts", 2));
        while (true) {
            long now = System.nanoTime();
            int n = attempts.size();
            long last = n == 0 ? start : attempts.get(n - 1)[0];
            if (now - start >= watchNs || (n >= allowed && now - last > quietNs)) {
                break;
            }
            Thread.sleep(100);
        }
        ctx.close(push);
        List<long[]> seen = new ArrayList<>(attempts);
        List<Long> attemptNumbers = new ArrayList<>();
        for (long[] a : seen) {
            attemptNumbers.add(a[1]);
        }
        Long gap = seen.size() < 2 ? null : msBetween(seen.get(0)[0], seen.get(1)[0]);

        // The dead-letter queue of group g, read by another group until the message arrives or
        // 85 s after the send (at least 15 s): Apache moves the message there up to ~30 s after
        // the last attempt. Its route exists only once something was dead-lettered, so building
        // the consumer is retried until then. Never past the scenario's own limit.
        long readUntil = Math.max(start + TimeUnit.SECONDS.toNanos(85), System.nanoTime() + TimeUnit.SECONDS.toNanos(15));
        readUntil = Math.min(readUntil, System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ctx.msLeft() - 2_000));
        List<String> dlqBodies = new ArrayList<>();
        Map<String, Object> dlqOutcome = null;
        SimpleConsumer dlq = null;
        while (dlq == null) {
            try {
                dlq = ctx.simple(null, g + "-dlq", "%DLQ%" + g, FilterExpression.SUB_ALL);
            } catch (Exception e) {
                dlqOutcome = errorOutcome(e);
                if (readUntil - System.nanoTime() < TimeUnit.SECONDS.toNanos(2)) {
                    break;
                }
                Thread.sleep(1_000);
            }
        }
        if (dlq != null) {
            long left = TimeUnit.NANOSECONDS.toMillis(readUntil - System.nanoTime());
            try {
                dlqBodies = sortedBodies(receive(dlq, 1, Math.max(0, left), DEFAULT_INVISIBLE, true, null));
                dlqOutcome = okOutcome();
            } catch (Exception e) {
                dlqOutcome = errorOutcome(e);
            }
        }
        return observed("attempts", attemptNumbers, "retry_gap_ms", gap,
            "dlq_topic", dlqBodies.isEmpty() ? null : "%DLQ%g", "dlq_bodies", dlqBodies,
            "dlq_read_outcome", dlqOutcome);
    }

    // ---------------------------------------------------------------- refusals

    static Map<String, Object> badInput(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        Producer producer = ctx.producer(null, null, t);
        Map<String, Object> cases = new LinkedHashMap<>();
        for (String c : ctx.listParam("cases")) {
            switch (c) {
                case "reserved_property":
                    cases.put(c, outcomeOf(() -> producer.send(
                        ctx.message(t, "reserved").addProperty("UNIQ_KEY", "x").build())));
                    break;
                case "body_5mib":
                    cases.put(c, outcomeOf(() -> producer.send(Ctx.provider().newMessageBuilder().setTopic(t)
                        .setBody(new byte[5 * 1024 * 1024]).build())));
                    break;
                case "bad_topic_name":
                    cases.put(c, outcomeOf(() -> producer.send(ctx.message("bad topic!", "bad").build())));
                    break;
                case "missing_topic":
                    cases.put(c, outcomeOf(() -> producer.send(ctx.message(t + "-missing", "missing").build())));
                    break;
                case "bad_tag":
                    cases.put(c, outcomeOf(() -> producer.send(ctx.message(t, "tag").setTag("a|b").build())));
                    break;
                default:
                    Map<String, Object> unknown = observed("outcome", "error", "code", null, "side", null,
                        "message", "this runner does not know case '" + c + "'");
                    cases.put(c, unknown);
            }
        }
        return observed("cases", cases);
    }

    static Map<String, Object> messageTypeMismatch(Ctx ctx) throws Exception {
        String normal = ctx.topic("normal");
        String fifo = ctx.topic("fifo");
        String txTopic = ctx.topic("tx");
        Producer producer = ctx.producer(null, null);
        Map<String, Object> cases = new LinkedHashMap<>();
        for (String c : ctx.listParam("cases")) {
            switch (c) {
                case "fifo_to_normal":
                    cases.put(c, outcomeOf(() -> producer.send(
                        ctx.message(normal, "fifo").setMessageGroup("mg").build())));
                    break;
                case "tx_to_normal":
                    // The outcome of the transactional send; when it was accepted, of the commit after it.
                    cases.put(c, outcomeOf(() -> {
                        Producer txp = ctx.producer(null, new Checker(List.of("COMMIT")), normal);
                        Transaction tx = txp.beginTransaction();
                        txp.send(ctx.message(normal, "tx").build(), tx);
                        tx.commit();
                    }));
                    break;
                case "delay_to_normal":
                    cases.put(c, outcomeOf(() -> producer.send(ctx.message(normal, "delay")
                        .setDeliveryTimestamp(System.currentTimeMillis() + 1_000).build())));
                    break;
                case "normal_to_fifo":
                    cases.put(c, outcomeOf(() -> producer.send(ctx.message(fifo, "normal").build())));
                    break;
                case "normal_to_tx":
                    cases.put(c, outcomeOf(() -> producer.send(ctx.message(txTopic, "normal").build())));
                    break;
                default:
                    cases.put(c, observed("outcome", "error", "code", null, "side", null,
                        "message", "this runner does not know case '" + c + "'"));
            }
        }
        return observed("cases", cases);
    }

    // ---------------------------------------------------------------- namespaces

    static Map<String, Object> namespaceIsolation(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        String g = ctx.group("g");
        List<String> namespaces = ctx.listParam("namespaces");
        Map<String, SimpleConsumer> consumers = new LinkedHashMap<>();
        for (String ns : namespaces) {
            consumers.put(ns, ctx.simple(ns, g, t, FilterExpression.SUB_ALL));
        }
        for (String ns : namespaces) {
            Producer p = ctx.producer(ns, null, t);
            p.send(ctx.message(t, "ns-" + (ns.isEmpty() ? "none" : ns)).build());
        }
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, namespaces.size()));
        try {
            Map<String, Future<List<Got>>> futures = new LinkedHashMap<>();
            for (Map.Entry<String, SimpleConsumer> e : consumers.entrySet()) {
                futures.put(e.getKey(), pool.submit(() -> receiveFor(e.getValue(), 6_000)));
            }
            Map<String, Object> received = new LinkedHashMap<>();
            for (Map.Entry<String, Future<List<Got>>> e : futures.entrySet()) {
                received.put(e.getKey(), sortedBodies(e.getValue().get(20, TimeUnit.SECONDS)));
            }
            return observed("received", received);
        } finally {
            pool.shutdownNow();
        }
    }

    // ---------------------------------------------------------------- priority and lite

    static Map<String, Object> priority(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        // No topic announced at start: a refused topic then shows in the send's outcome.
        Producer producer = ctx.producer(null, null);
        Map<String, Object> first = null;
        List<Object> sendOutcomes = new ArrayList<>();
        for (String p : ctx.listParam("priorities")) {
            int prio = Integer.parseInt(p);
            Map<String, Object> o = outcomeOf(() -> producer.send(ctx.message(t, "pr" + prio).setPriority(prio).build()));
            sendOutcomes.add(o.get("outcome"));
            if (first == null) {
                first = o;
            }
            if (!"ok".equals(o.get("outcome"))) {
                break;
            }
        }
        List<Integer> received = new ArrayList<>();
        List<Integer> viewPriorities = new ArrayList<>();
        Map<String, Object> consumerOutcome = outcomeOf(() -> {
            SimpleConsumer consumer = ctx.simple(null, ctx.group("g"), t, FilterExpression.SUB_ALL);
            for (Got g : receiveFor(consumer, 6_000)) {
                String b = g.body();
                received.add(b.startsWith("pr") ? Integer.valueOf(b.substring(2)) : null);
                viewPriorities.add(g.view.getPriority().orElse(null));
            }
        });
        return observed("send_outcome", first, "received_priorities", received,
            "message_priorities", viewPriorities, "send_outcomes", sendOutcomes,
            "consumer_outcome", consumerOutcome);
    }

    static Map<String, Object> lite(Ctx ctx) throws Exception {
        String t = ctx.topic("t");
        String liteTopic = ctx.textParam("lite_topic", "lt1");
        AtomicInteger received = new AtomicInteger();
        // The consumer is subscribed before the send, so that where a new lite subscription starts
        // (latest or earliest offset) does not decide the result.
        Map<String, Object> consumerOutcome = outcomeOf(() -> {
            LitePushConsumer c = ctx.litePush(ctx.group("g"), t, v -> {
                received.incrementAndGet();
                return ConsumeResult.SUCCESS;
            });
            c.subscribeLite(liteTopic);
        });
        Producer producer = ctx.producer(null, null);
        Map<String, Object> send = outcomeOf(() -> producer.send(ctx.message(t, "lite").setLiteTopic(liteTopic).build()));
        Thread.sleep(8_000);
        return observed("send_outcome", send, "received", received.get(), "consumer_outcome", consumerOutcome);
    }
}
