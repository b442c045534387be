package conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.FutureTask;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Predicate;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;

/**
 * Conformance runner for the official RocketMQ 5 Java client (tests/conformance/README.md).
 *
 * <pre>java -cp ... conformance.Runner INPUT.json OUTPUT.json</pre>
 *
 * Performs the input's scenarios in order, each in its own thread with a time limit; whatever
 * happens, every client a scenario made is closed before the next one starts. OUTPUT.json is
 * rewritten after every scenario, so a crash still leaves the results so far.
 */
public final class Runner {
    static final String LIBRARY = "org.apache.rocketmq:rocketmq-client-java";
    /**
     * Time a scenario's body may take; closing its clients (at most 5 s) comes on top (README:
     * 90 s in all). -Dconformance.scenario.limit.ms overrides it (to test the timeout path).
     */
    static final long SCENARIO_LIMIT_MS = Long.getLong("conformance.scenario.limit.ms", 85_000);
    static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(10);
    static final Duration AWAIT = Duration.ofSeconds(2);
    static final Duration DEFAULT_INVISIBLE = Duration.ofSeconds(20);
    static final int BATCH = 16;

    static final ObjectMapper JSON = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);

    private Runner() {
    }

    /** Thrown by a scenario the client library cannot express. */
    static final class Unsupported extends RuntimeException {
        Unsupported(String reason) {
            super(reason);
        }
    }

    /** One scenario: returns its `observed` object. */
    @FunctionalInterface
    interface Scenario {
        Map<String, Object> run(Ctx ctx) throws Exception;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: Runner INPUT.json OUTPUT.json");
            System.exit(2);
        }
        Path input = Path.of(args[0]);
        Path output = Path.of(args[1]).toAbsolutePath();
        Path outDir = output.getParent();
        Files.createDirectories(outDir);
        // The client logs through its own (shaded) logback to ${rocketmq.log.root}; its console
        // appender is off unless mq.consoleAppender.enabled is set. Set this before any client class loads.
        if (System.getProperty("rocketmq.log.root") == null) {
            System.setProperty("rocketmq.log.root", outDir.resolve("java-client-logs").toString());
        }

        JsonNode in = JSON.readTree(input.toFile());
        String endpoint = in.path("endpoint").asText();

        Map<String, Object> client = new LinkedHashMap<>();
        client.put("language", "java");
        client.put("library", LIBRARY);
        client.put("version", clientVersion());
        Map<String, Object> results = new LinkedHashMap<>();
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("client", client);
        doc.put("results", results);

        for (JsonNode spec : in.path("scenarios")) {
            String id = spec.path("id").asText();
            System.err.printf("[java runner] %s ...%n", id);
            Map<String, Object> result = runOne(endpoint, spec);
            results.put(id, result);
            System.err.printf("[java runner] %s: %s (%s ms)%n", id, result.get("status"), result.get("elapsed_ms"));
            write(output, doc);
        }
        write(output, doc);
        // The client library may leave non-daemon threads behind (e.g. a client that failed to close).
        System.exit(0);
    }

    static Map<String, Object> runOne(String endpoint, JsonNode spec) {
        String id = spec.path("id").asText();
        Map<String, Object> result = new LinkedHashMap<>();
        Scenario scenario = Scenarios.ALL.get(id);
        if (scenario == null) {
            result.put("status", "error");
            result.put("error", "this runner does not know scenario '" + id + "'");
            result.put("elapsed_ms", 0);
            return result;
        }
        Ctx ctx = new Ctx(endpoint, spec);
        long start = System.nanoTime();
        FutureTask<Map<String, Object>> task = new FutureTask<>(() -> scenario.run(ctx));
        Thread thread = new Thread(task, "scenario-" + id);
        thread.setDaemon(true);
        thread.start();
        try {
            Map<String, Object> observed = task.get(SCENARIO_LIMIT_MS, TimeUnit.MILLISECONDS);
            result.put("status", "ok");
            result.put("elapsed_ms", msSince(start));
            result.put("observed", observed);
        } catch (TimeoutException e) {
            thread.interrupt();
            result.put("status", "error");
            result.put("error", "timeout: the scenario did not finish within " + SCENARIO_LIMIT_MS + " ms");
            result.put("elapsed_ms", msSince(start));
        } catch (ExecutionException e) {
            Throwable cause = e.getCause() == null ? e : e.getCause();
            if (cause instanceof Unsupported) {
                result.put("status", "unsupported");
                result.put("reason", cause.getMessage());
            } else {
                result.put("status", "error");
                result.put("error", describe(cause));
                result.put("elapsed_ms", msSince(start));
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            result.put("status", "error");
            result.put("error", "runner interrupted");
            result.put("elapsed_ms", msSince(start));
        } finally {
            ctx.closeAll();
        }
        return result;
    }

    static void write(Path output, Map<String, Object> doc) throws Exception {
        Path tmp = output.resolveSibling(output.getFileName() + ".tmp");
        JSON.writeValue(tmp.toFile(), doc);
        Files.move(tmp, output, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    static String clientVersion() {
        String res = "/META-INF/maven/org.apache.rocketmq/rocketmq-client-java/pom.properties";
        try (InputStream s = Runner.class.getResourceAsStream(res)) {
            if (s != null) {
                Properties p = new Properties();
                p.load(s);
                return p.getProperty("version");
            }
        } catch (Exception ignored) {
            // fall through
        }
        return null;
    }

    // ---------------------------------------------------------------- outcomes

    private static final Pattern RESPONSE_CODE = Pattern.compile("response-code=(\\d+)");

    static Map<String, Object> okOutcome() {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("outcome", "ok");
        o.put("code", null);
        o.put("side", null);
        o.put("message", null);
        return o;
    }

    /**
     * The outcome object of a refusal. The Java client carries the server's apache.rocketmq.v2.Code
     * only in the text of its ClientException ("[request-id=..., response-code=40402] ..."; the class
     * has no getter), so it is read from there. A failure with no such code is a client-side refusal
     * (IllegalArgumentException from the builder, the client's own body-size check, ...), except a
     * gRPC status error, which the server (transport) raised without a RocketMQ code.
     */
    static Map<String, Object> errorOutcome(Throwable t) {
        Integer code = null;
        boolean grpc = false;
        int depth = 0;
        for (Throwable x = t; x != null && depth < 12; x = x.getCause(), depth++) {
            String m = x.getMessage();
            if (m != null) {
                Matcher matcher = RESPONSE_CODE.matcher(m);
                if (matcher.find()) {
                    code = Integer.valueOf(matcher.group(1));
                    break;
                }
            }
            String cn = x.getClass().getName();
            if (cn.endsWith(".StatusRuntimeException") || cn.endsWith(".StatusException")) {
                grpc = true;
            }
        }
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("outcome", "error");
        o.put("code", code);
        o.put("side", code != null || grpc ? "server" : "client");
        o.put("message", describe(t));
        return o;
    }

    /** Runs an action and returns its outcome object. */
    static Map<String, Object> outcomeOf(Action action) {
        try {
            action.run();
            return okOutcome();
        } catch (Throwable t) {
            if (t instanceof InterruptedException) {
                Thread.currentThread().interrupt();
            }
            return errorOutcome(t);
        }
    }

    @FunctionalInterface
    interface Action {
        void run() throws Exception;
    }

    static String describe(Throwable t) {
        StringBuilder sb = new StringBuilder();
        int depth = 0;
        String last = null;
        for (Throwable x = t; x != null && depth < 5; x = x.getCause(), depth++) {
            String part = x.getClass().getSimpleName() + ": " + x.getMessage();
            if (x.getMessage() != null && last != null && last.contains(x.getMessage())) {
                continue;
            }
            if (sb.length() > 0) {
                sb.append(" <- ");
            }
            sb.append(part);
            last = part;
        }
        return sb.toString();
    }

    // ---------------------------------------------------------------- receiving

    /** One received message and when its receive call returned. */
    static final class Got {
        final MessageView view;
        final long wallMs;
        final long monoNs;

        Got(MessageView view, long wallMs, long monoNs) {
            this.view = view;
            this.wallMs = wallMs;
            this.monoNs = monoNs;
        }

        String body() {
            return Scenarios.body(view);
        }

        String id() {
            return view.getMessageId().toString();
        }
    }

    /**
     * Receives batches of up to 16 until `want` messages matching `match` arrived or `durationMs`
     * passed (a receive call started before the deadline may long-poll past it by the await time).
     * Every message is returned, matching or not; `ack` acks each one as it comes.
     */
    static List<Got> receive(SimpleConsumer consumer, int want, long durationMs, Duration invisible,
        boolean ack, Predicate<MessageView> match) throws Exception {
        List<Got> got = new ArrayList<>();
        int matched = 0;
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(durationMs);
        while (matched < want && System.nanoTime() < deadline) {
            if (Thread.currentThread().isInterrupted()) {
                throw new InterruptedException("scenario stopped");
            }
            List<MessageView> batch = consumer.receive(BATCH, invisible);
            long wall = System.currentTimeMillis();
            long mono = System.nanoTime();
            for (MessageView view : batch) {
                got.add(new Got(view, wall, mono));
                if (match == null || match.test(view)) {
                    matched++;
                }
                if (ack) {
                    consumer.ack(view);
                }
            }
        }
        return got;
    }

    static List<Got> receiveFor(SimpleConsumer consumer, long durationMs) throws Exception {
        return receive(consumer, Integer.MAX_VALUE, durationMs, DEFAULT_INVISIBLE, true, null);
    }

    static long msSince(long startNs) {
        return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNs);
    }

    static long msBetween(long fromNs, long toNs) {
        return TimeUnit.NANOSECONDS.toMillis(toNs - fromNs);
    }
}
