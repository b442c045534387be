package conformance;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.LitePushConsumer;
import org.apache.rocketmq.client.apis.consumer.MessageListener;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.ProducerBuilder;
import org.apache.rocketmq.client.apis.producer.TransactionChecker;

/**
 * One scenario's inputs and the clients it made. Every client is built through here and tracked,
 * so that the runner can close them all when the scenario ends, fails or runs out of time.
 */
final class Ctx {
    private static volatile ClientServiceProvider provider;

    final String endpoint;
    final String id;
    final JsonNode params;
    /** The broker timing the orchestrator set (scenarios.json "timing"), may be missing. */
    final JsonNode timing;
    final long startNs = System.nanoTime();
    private final JsonNode topics;
    private final JsonNode groups;
    private final List<AutoCloseable> clients = new ArrayList<>();
    private final List<Thread> closing = new ArrayList<>();
    private boolean closed;

    Ctx(String endpoint, JsonNode spec) {
        this.endpoint = endpoint;
        this.id = spec.path("id").asText();
        this.params = spec.path("params");
        this.timing = spec.path("timing");
        this.topics = spec.path("topics");
        this.groups = spec.path("groups");
    }

    static ClientServiceProvider provider() {
        if (provider == null) {
            provider = ClientServiceProvider.loadService();
        }
        return provider;
    }

    String topic(String role) {
        JsonNode n = topics.get(role);
        if (n == null || !n.isTextual()) {
            throw new IllegalArgumentException("input gives no topic for role '" + role + "'");
        }
        return n.asText();
    }

    String group(String role) {
        JsonNode n = groups.get(role);
        if (n == null || !n.isTextual()) {
            throw new IllegalArgumentException("input gives no group for role '" + role + "'");
        }
        return n.asText();
    }

    int intParam(String name, int dflt) {
        JsonNode n = params.get(name);
        return n == null || n.isNull() ? dflt : n.asInt();
    }

    long longParam(String name, long dflt) {
        JsonNode n = params.get(name);
        return n == null || n.isNull() ? dflt : n.asLong();
    }

    int timingInt(String name, int dflt) {
        JsonNode n = timing.get(name);
        return n == null || n.isNull() ? dflt : n.asInt();
    }

    /** Milliseconds left of the scenario's time limit. */
    long msLeft() {
        return Runner.SCENARIO_LIMIT_MS - Runner.msSince(startNs);
    }

    String textParam(String name, String dflt) {
        JsonNode n = params.get(name);
        return n == null || n.isNull() ? dflt : n.asText();
    }

    List<String> listParam(String name) {
        List<String> out = new ArrayList<>();
        for (JsonNode n : params.path(name)) {
            out.add(n.asText());
        }
        return out;
    }

    // ---------------------------------------------------------------- clients

    ClientConfiguration config(String namespace) {
        return ClientConfiguration.newBuilder()
            .setEndpoints(endpoint)
            .enableSsl(false)
            .setRequestTimeout(Runner.REQUEST_TIMEOUT)
            .setNamespace(namespace == null ? "" : namespace)
            .build();
    }

    MessageBuilder message(String topic, String body) {
        return provider().newMessageBuilder().setTopic(topic).setBody(Scenarios.utf8(body));
    }

    /** A producer; `topics` are announced at start (its routes fetched then), `checker` may be null. */
    Producer producer(String namespace, TransactionChecker checker, String... topics) throws ClientException {
        checkOpen();
        ProducerBuilder b = provider().newProducerBuilder().setClientConfiguration(config(namespace));
        if (topics.length > 0) {
            b.setTopics(topics);
        }
        if (checker != null) {
            b.setTransactionChecker(checker);
        }
        return track(b.build());
    }

    SimpleConsumer simple(String namespace, String group, String topic, FilterExpression filter)
        throws ClientException {
        checkOpen();
        return track(provider().newSimpleConsumerBuilder()
            .setClientConfiguration(config(namespace))
            .setConsumerGroup(group)
            .setAwaitDuration(Runner.AWAIT)
            .setSubscriptionExpressions(Collections.singletonMap(topic, filter))
            .build());
    }

    PushConsumer push(String group, String topic, FilterExpression filter, MessageListener listener)
        throws ClientException {
        checkOpen();
        return track(provider().newPushConsumerBuilder()
            .setClientConfiguration(config(null))
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Map.of(topic, filter))
            .setMessageListener(listener)
            .build());
    }

    LitePushConsumer litePush(String group, String topic, MessageListener listener) throws ClientException {
        checkOpen();
        return track(provider().newLitePushConsumerBuilder()
            .setClientConfiguration(config(null))
            .setConsumerGroup(group)
            .bindTopic(topic)
            .setMessageListener(listener)
            .build());
    }

    // ---------------------------------------------------------------- closing

    private synchronized void checkOpen() {
        if (closed) {
            throw new IllegalStateException("scenario was stopped");
        }
    }

    private <T extends AutoCloseable> T track(T client) {
        synchronized (this) {
            if (!closed) {
                clients.add(client);
                return client;
            }
        }
        closeQuietly(client);
        throw new IllegalStateException("scenario was stopped");
    }

    /**
     * Starts closing one client now without waiting (a push consumer's close() waits for its
     * long-polling receive calls); closeAll() waits for it like for the others.
     */
    void close(AutoCloseable client) {
        synchronized (this) {
            clients.remove(client);
            closing.add(startClose(client));
        }
    }

    /** Closes one client now and waits for it (at most CLOSE_WAIT); the end of the scenario skips it. */
    void closeNow(AutoCloseable client) {
        synchronized (this) {
            clients.remove(client);
        }
        closeQuietly(client);
    }

    /**
     * Closes every client still open, all at once, and waits for all closes at most CLOSE_WAIT;
     * a close still running then finishes in the background (or at exit). Idempotent.
     */
    void closeAll() {
        List<Thread> threads;
        synchronized (this) {
            closed = true;
            for (AutoCloseable c : clients) {
                closing.add(startClose(c));
            }
            clients.clear();
            threads = new ArrayList<>(closing);
        }
        long start = System.nanoTime();
        long deadline = start + CLOSE_WAIT.toNanos();
        int open = 0;
        for (Thread t : threads) {
            joinUntil(t, deadline);
            open += t.isAlive() ? 1 : 0;
        }
        System.err.printf("[java runner] %s: closed %d client(s) in %d ms%s%n", id, threads.size(),
            Runner.msSince(start), open > 0 ? " (" + open + " still closing in the background)" : "");
    }

    private static final Duration CLOSE_WAIT = Duration.ofSeconds(5);

    /** close() waits for the client's services to stop; never let that hang the runner. */
    static void closeQuietly(AutoCloseable client) {
        joinUntil(startClose(client), System.nanoTime() + CLOSE_WAIT.toNanos());
    }

    private static Thread startClose(AutoCloseable client) {
        Thread t = new Thread(() -> {
            try {
                client.close();
            } catch (Throwable ignored) {
                // a client that fails to close is left to System.exit
            }
        }, "close-client");
        t.setDaemon(true);
        t.start();
        return t;
    }

    private static void joinUntil(Thread t, long deadlineNs) {
        long left = deadlineNs - System.nanoTime();
        if (left <= 0) {
            return;
        }
        try {
            t.join(Math.max(1, left / 1_000_000));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
