// Kafka's own Java client as a test peer of kwire (tests/support/java_peer.py
// compiles and runs it). JSON lines on stdin and stdout; keys, values and
// header values are base64 (null stays null). The first stdin line names the
// mode and its settings:
//
//   {"mode": "produce", "config": {...}}      then one command a line:
//       {"op": "send", "topic": t, "partition": p|null, "key": b64|null, "value": b64|null,
//        "headers": [[name, b64|null], ...], "timestamp": ms|null}
//       {"op": "begin"} {"op": "commit"} {"op": "abort"} {"op": "flush"}
//     a transactional.id in config runs initTransactions() first. Each op but
//     send is answered {"event": "ok", "op": ...} once done, after a "sent"
//     event for every send before it, in order:
//       {"event": "sent", "id": n, "partition", "offset", "timestamp"} or {"event": "sent", "id": n, "error": ...}
//     At the end of input the producer is flushed and closed: {"event": "closed"}.
//
//   {"mode": "consume", "config": {...}, "assign": [[t, p], ...] | "subscribe": [t, ...],
//    "max_records": n|null, "idle_ms": ms, "timeout_ms": ms, "until_end": bool}
//     prints {"event": "record", "topic", "partition", "offset", "timestamp", "timestamp_type",
//     "key", "value", "headers"} for each record, then {"event": "done", "count": n, "reason": ...}.
//     until_end (assign only): stop once every partition's position reaches the end offset it had
//     at the start (for read_committed, the last stable offset).
//
//   {"mode": "share-consume", "config": {...}, "subscribe": [t, ...], "max_records": n|null, "idle_ms": ms,
//    "timeout_ms": ms, "release_below": k}
//     a KafkaShareConsumer (KIP-932) in the config's group.id: prints each record as the consume mode
//     does, with "delivery_count"; with explicit acknowledgement (share.acknowledgement.mode) it
//     releases a record delivered fewer than release_below times and accepts the rest. Stops at
//     max_records, after idle_ms without records or at timeout_ms; commitSync, close, then
//     {"event": "done", "count": n, "reason": ...}. With "quiet": true no record is printed, and the
//     done event adds "first_ms" and "last_ms" (wall clock of the first and last record) and
//     "cpu_ms" (the JVM's CPU time from the first record to the last): benchmarks/compare_share.py.
//
//   {"mode": "group-member", "config": {...}, "subscribe": [t, ...]}
//     stays in the group polling, printing "record" events and its rebalances
//     ({"event": "assigned"|"revoked"|"lost", "partitions": [[t, p], ...]}); with
//     enable.auto.commit false it commits synchronously what it has printed in
//     onPartitionsRevoked and before it leaves. A "stop" line on stdin (or its
//     end) makes it commit, close (leaving the group) and print {"event": "closed"}.
//     A "pause" line pauses its whole assignment ({"event": "paused", "partitions": ...});
//     each "assigned" event also says what is paused then ("paused": [[t, p], ...]).
//
//   {"mode": "describe-configs", "config": {...}, "resources": [[type, name], ...]}
//     Java's Admin.describeConfigs: {"event": "configs", "type": t, "name": n, "configs": {name: value|null}}
//     for each resource (type: ConfigResource.Type's name in lower case: topic, broker, group, ...).
//
//   {"mode": "group-offsets", "config": {...}, "group": g}
//     Java's Admin.listConsumerGroupOffsets: {"event": "offset", "topic", "partition", "offset", "metadata"}
//     for each partition the group committed.
//
// Errors: {"event": "error", "error": "..."} and exit status 1.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaPeer {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Base64.Encoder B64 = Base64.getEncoder();
    private static final Base64.Decoder UNB64 = Base64.getDecoder();
    private static PrintStream out;

    public static void main(String[] args) throws Exception {
        // stdout is the JSON channel: anything else printing there (a logger) goes to stderr
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String first = in.readLine();
        if (first == null) {
            fail("no command on stdin");
        }
        JsonNode cmd = JSON.readTree(first);
        String mode = cmd.path("mode").asText();
        try {
            switch (mode) {
                case "produce": produce(cmd, in); break;
                case "consume": consume(cmd); break;
                case "group-member": groupMember(cmd, in); break;
                case "describe-configs": describeConfigs(cmd); break;
                case "group-offsets": groupOffsets(cmd); break;
                case "metric-names": metricNames(cmd); break;
                case "share-consume": shareConsume(cmd); break;
                default: fail("unknown mode " + mode);
            }
        } catch (Exception e) {
            e.printStackTrace();
            fail(e.toString());
        }
        out.flush();
        System.exit(0);
    }

    private static void fail(String message) {
        ObjectNode o = JSON.createObjectNode();
        o.put("event", "error");
        o.put("error", message);
        emit(o);
        System.exit(1);
    }

    private static synchronized void emit(ObjectNode o) {
        out.println(o.toString());
        out.flush();
    }

    private static ObjectNode event(String name) {
        ObjectNode o = JSON.createObjectNode();
        o.put("event", name);
        return o;
    }

    private static void describeConfigs(JsonNode cmd) throws Exception {
        List<ConfigResource> resources = new ArrayList<>();
        for (JsonNode r : cmd.path("resources")) {
            resources.add(new ConfigResource(ConfigResource.Type.valueOf(r.get(0).asText().toUpperCase(Locale.ROOT)),
                                             r.get(1).asText()));
        }
        try (Admin admin = Admin.create(props(cmd))) {
            Map<ConfigResource, Config> got = admin.describeConfigs(resources).all().get();
            for (ConfigResource r : resources) {
                ObjectNode o = event("configs");
                o.put("type", r.type().name().toLowerCase(Locale.ROOT));
                o.put("name", r.name());
                ObjectNode configs = o.putObject("configs");
                for (ConfigEntry e : got.get(r).entries()) {
                    configs.put(e.name(), e.value());
                }
                emit(o);
            }
        }
    }

    private static void groupOffsets(JsonNode cmd) throws Exception {
        try (Admin admin = Admin.create(props(cmd))) {
            Map<TopicPartition, OffsetAndMetadata> got =
                admin.listConsumerGroupOffsets(cmd.path("group").asText()).partitionsToOffsetAndMetadata().get();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : got.entrySet()) {
                ObjectNode o = event("offset");
                o.put("topic", e.getKey().topic());
                o.put("partition", e.getKey().partition());
                o.put("offset", e.getValue().offset());
                o.put("metadata", e.getValue().metadata());
                emit(o);
            }
        }
    }

    /** The metrics Java's producer, consumer (in a group, after a record and a commit) and admin
     *  client register, one event each: the client's kind, the metric's group, name and tag keys. */
    private static void metricNames(JsonNode cmd) throws Exception {
        String topic = cmd.path("topic").asText();
        Properties pp = props(cmd);
        pp.put("key.serializer", ByteArraySerializer.class.getName());
        pp.put("value.serializer", ByteArraySerializer.class.getName());
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(pp)) {
            p.send(new ProducerRecord<>(topic, 0, null, "m".getBytes(StandardCharsets.UTF_8))).get();
            emitMetricNames("producer", p.metrics());
        }
        Properties cp = props(cmd);
        cp.put("key.deserializer", ByteArrayDeserializer.class.getName());
        cp.put("value.deserializer", ByteArrayDeserializer.class.getName());
        cp.put("group.id", cmd.path("group").asText());
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cp)) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60000;
            while (c.poll(Duration.ofMillis(200)).isEmpty() && System.currentTimeMillis() < deadline) {
            }
            c.commitSync();
            emitMetricNames("consumer", c.metrics());
        }
        try (Admin admin = Admin.create(props(cmd))) {
            admin.listTopics().names().get();
            emitMetricNames("admin", admin.metrics());
        }
    }

    private static void emitMetricNames(String kind, Map<org.apache.kafka.common.MetricName, ?> metrics) {
        for (org.apache.kafka.common.MetricName n : metrics.keySet()) {
            ObjectNode o = event("metric");
            o.put("kind", kind);
            o.put("group", n.group());
            o.put("name", n.name());
            ArrayNode tags = o.putArray("tags");
            n.tags().keySet().stream().sorted().forEach(tags::add);
            emit(o);
        }
    }

    private static Properties props(JsonNode cmd) {
        Properties p = new Properties();
        Iterator<Map.Entry<String, JsonNode>> it = cmd.path("config").fields();
        while (it.hasNext()) {
            Map.Entry<String, JsonNode> e = it.next();
            p.put(e.getKey(), e.getValue().asText());
        }
        return p;
    }

    private static byte[] bytes(JsonNode n) {
        return n == null || n.isNull() || n.isMissingNode() ? null : UNB64.decode(n.asText());
    }

    private static void putBytes(ObjectNode o, String name, byte[] b) {
        if (b == null) {
            o.putNull(name);
        } else {
            o.put(name, B64.encodeToString(b));
        }
    }

    private static ArrayNode partitions(Collection<TopicPartition> tps) {
        ArrayNode a = JSON.createArrayNode();
        for (TopicPartition tp : tps) {
            a.addArray().add(tp.topic()).add(tp.partition());
        }
        return a;
    }

    // ------------------------------------------------------------ produce
    private static final class Pending {
        final long id;
        final Future<RecordMetadata> future;

        Pending(long id, Future<RecordMetadata> future) {
            this.id = id;
            this.future = future;
        }
    }

    private static void report(List<Pending> pending) throws InterruptedException {
        for (Pending p : pending) {
            ObjectNode o = event("sent");
            o.put("id", p.id);
            try {
                RecordMetadata m = p.future.get();
                o.put("partition", m.partition());
                o.put("offset", m.offset());
                o.put("timestamp", m.timestamp());
            } catch (ExecutionException e) {
                o.put("error", String.valueOf(e.getCause()));
            }
            emit(o);
        }
        pending.clear();
    }

    private static void produce(JsonNode cmd, BufferedReader in) throws Exception {
        Properties p = props(cmd);
        boolean transactional = p.containsKey("transactional.id");
        List<Pending> pending = new ArrayList<>();
        long ids = 0;
        try (KafkaProducer<byte[], byte[]> producer =
                     new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            if (transactional) {
                producer.initTransactions();
            }
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                JsonNode c = JSON.readTree(line);
                String op = c.path("op").asText();
                if (op.equals("send")) {
                    List<Header> headers = new ArrayList<>();
                    for (JsonNode h : c.path("headers")) {
                        headers.add(new RecordHeader(h.get(0).asText(), bytes(h.get(1))));
                    }
                    JsonNode part = c.path("partition"), ts = c.path("timestamp");
                    ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(
                            c.path("topic").asText(),
                            part.isNumber() ? Integer.valueOf(part.asInt()) : null,
                            ts.isNumber() ? Long.valueOf(ts.asLong()) : null,
                            bytes(c.get("key")), bytes(c.get("value")), headers);
                    pending.add(new Pending(ids++, producer.send(r)));
                    continue;
                }
                switch (op) {
                    case "begin": producer.beginTransaction(); break;
                    case "commit": producer.commitTransaction(); break;
                    case "abort": producer.flush(); report(pending); producer.abortTransaction(); break;
                    case "flush": producer.flush(); break;
                    default: throw new IllegalArgumentException("unknown op " + op);
                }
                report(pending);
                ObjectNode ok = event("ok");
                ok.put("op", op);
                emit(ok);
            }
            producer.flush();
            report(pending);
        }
        emit(event("closed"));
    }

    // ------------------------------------------------------------ consume
    private static ObjectNode record(ConsumerRecord<byte[], byte[]> r) {
        ObjectNode o = event("record");
        o.put("topic", r.topic());
        o.put("partition", r.partition());
        o.put("offset", r.offset());
        o.put("timestamp", r.timestamp());
        o.put("timestamp_type", r.timestampType().id);
        putBytes(o, "key", r.key());
        putBytes(o, "value", r.value());
        ArrayNode hs = o.putArray("headers");
        for (Header h : r.headers()) {
            ArrayNode pair = hs.addArray();
            pair.add(h.key());
            if (h.value() == null) {
                pair.addNull();
            } else {
                pair.add(B64.encodeToString(h.value()));
            }
        }
        return o;
    }

    private static KafkaConsumer<byte[], byte[]> consumer(JsonNode cmd) {
        Properties p = props(cmd);
        p.putIfAbsent("auto.offset.reset", "earliest");
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    private static void consume(JsonNode cmd) {
        long maxRecords = cmd.path("max_records").isNumber() ? cmd.path("max_records").asLong() : Long.MAX_VALUE;
        long idleMs = cmd.path("idle_ms").asLong(5000);
        long deadline = System.currentTimeMillis() + cmd.path("timeout_ms").asLong(60000);
        boolean untilEnd = cmd.path("until_end").asBoolean(false);
        long count = 0;
        String reason = "timeout";
        try (KafkaConsumer<byte[], byte[]> c = consumer(cmd)) {
            Map<TopicPartition, Long> end = new HashMap<>();
            if (cmd.has("assign")) {
                List<TopicPartition> tps = new ArrayList<>();
                for (JsonNode tp : cmd.path("assign")) {
                    tps.add(new TopicPartition(tp.get(0).asText(), tp.get(1).asInt()));
                }
                c.assign(tps);
                c.seekToBeginning(tps);
                if (untilEnd) {
                    end.putAll(c.endOffsets(tps));
                }
            } else {
                c.subscribe(subscribed(cmd));
            }
            long lastRecord = System.currentTimeMillis();
            while (true) {
                if (count >= maxRecords) {
                    reason = "max_records";
                    break;
                }
                if (untilEnd && caughtUp(c, end)) {
                    reason = "end";
                    break;
                }
                long now = System.currentTimeMillis();
                if (now - lastRecord >= idleMs) {
                    reason = "idle";
                    break;
                }
                if (now >= deadline) {
                    break;
                }
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(100));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    emit(record(r));
                    count++;
                    lastRecord = System.currentTimeMillis();
                }
            }
        }
        ObjectNode done = event("done");
        done.put("count", count);
        done.put("reason", reason);
        emit(done);
    }

    private static void shareConsume(JsonNode cmd) {
        long maxRecords = cmd.path("max_records").isNumber() ? cmd.path("max_records").asLong() : Long.MAX_VALUE;
        long idleMs = cmd.path("idle_ms").asLong(5000);
        long deadline = System.currentTimeMillis() + cmd.path("timeout_ms").asLong(60000);
        int releaseBelow = cmd.path("release_below").asInt(0);
        Properties p = props(cmd);
        boolean explicit = "explicit".equals(p.getProperty("share.acknowledgement.mode"));
        boolean quiet = cmd.path("quiet").asBoolean(false);
        long count = 0;
        long firstMs = 0;
        long lastMs = 0;
        long cpuNs = 0;
        long firstCpuNs = 0;
        String reason = "timeout";
        try (KafkaShareConsumer<byte[], byte[]> c =
                 new KafkaShareConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            c.subscribe(subscribed(cmd));
            long lastRecord = System.currentTimeMillis();
            while (true) {
                String stop = stopReason(count, maxRecords, lastRecord, idleMs, deadline);
                if (stop != null) {
                    reason = stop;
                    break;
                }
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(100));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    int delivered = r.deliveryCount().map(Short::intValue).orElse(-1);
                    if (!quiet) {
                        ObjectNode o = record(r);
                        o.put("delivery_count", delivered);
                        emit(o);
                    }
                    count++;
                    lastRecord = System.currentTimeMillis();
                    if (explicit) {
                        c.acknowledge(r, delivered < releaseBelow ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
                    }
                }
                if (!recs.isEmpty()) {
                    lastMs = System.currentTimeMillis();
                    cpuNs = ((com.sun.management.OperatingSystemMXBean)
                             java.lang.management.ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
                    if (firstMs == 0) {
                        firstMs = lastMs;
                        firstCpuNs = cpuNs;
                    }
                }
            }
            c.commitSync();
        }
        ObjectNode done = event("done");
        done.put("count", count);
        done.put("reason", reason);
        if (quiet) {
            done.put("first_ms", firstMs);
            done.put("last_ms", lastMs);
            done.put("cpu_ms", (cpuNs - firstCpuNs) / 1_000_000);
        }
        emit(done);
    }

    /** The topics a command's "subscribe" names. */
    private static List<String> subscribed(JsonNode cmd) {
        List<String> topics = new ArrayList<>();
        for (JsonNode t : cmd.path("subscribe")) {
            topics.add(t.asText());
        }
        return topics;
    }

    /** Why a consuming loop stops now (null: it goes on): "max_records", "idle" or "timeout". */
    private static String stopReason(long count, long maxRecords, long lastRecord, long idleMs, long deadline) {
        long now = System.currentTimeMillis();
        if (count >= maxRecords) {
            return "max_records";
        }
        if (now - lastRecord >= idleMs) {
            return "idle";
        }
        return now >= deadline ? "timeout" : null;
    }

    private static boolean caughtUp(KafkaConsumer<byte[], byte[]> c, Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            if (c.position(e.getKey()) < e.getValue()) {
                return false;
            }
        }
        return true;
    }

    // ------------------------------------------------------- group member
    private static void groupMember(JsonNode cmd, BufferedReader in) {
        AtomicBoolean stop = new AtomicBoolean(false);
        AtomicBoolean pause = new AtomicBoolean(false);
        KafkaConsumer<byte[], byte[]> c = consumer(cmd);
        boolean autoCommit = Boolean.parseBoolean(props(cmd).getProperty("enable.auto.commit", "true"));
        Thread reader = new Thread(() -> {
            try {
                String line;
                while ((line = in.readLine()) != null && !line.trim().equals("stop")) {
                    if (line.trim().equals("pause")) {
                        pause.set(true);    // done by the polling thread (the consumer is not thread-safe)
                    }
                }
            } catch (Exception e) {
                // end of input: stop as well
            }
            stop.set(true);     // seen within a poll's 100 ms (no wakeup(): it could break a commit in a callback)
        }, "stdin");
        reader.setDaemon(true);
        List<String> topics = subscribed(cmd);
        c.subscribe(topics, new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> revoked) {
                if (!autoCommit && !revoked.isEmpty()) {
                    commit(c, revoked);
                }
                ObjectNode o = event("revoked");
                o.set("partitions", partitions(revoked));
                emit(o);
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> assigned) {
                ObjectNode o = event("assigned");
                o.set("partitions", partitions(assigned));
                o.set("paused", partitions(c.paused()));
                emit(o);
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> lost) {
                ObjectNode o = event("lost");
                o.set("partitions", partitions(lost));
                emit(o);
            }
        });
        reader.start();
        emit(event("started"));
        try {
            while (!stop.get()) {
                if (pause.getAndSet(false)) {
                    c.pause(c.assignment());
                    ObjectNode o = event("paused");
                    o.set("partitions", partitions(c.paused()));
                    emit(o);
                }
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(100));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    emit(record(r));
                }
            }
            if (!autoCommit) {
                commit(c, c.assignment());
            }
        } finally {
            c.close(Duration.ofSeconds(30));
        }
        emit(event("closed"));
    }

    /** Commits the positions of ``tps`` (everything returned by poll so far), synchronously. */
    private static void commit(KafkaConsumer<byte[], byte[]> c, Collection<TopicPartition> tps) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (TopicPartition tp : tps) {
            offsets.put(tp, new OffsetAndMetadata(c.position(tp)));
        }
        c.commitSync(offsets);
        ObjectNode o = event("committed");
        ArrayNode a = o.putArray("offsets");
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            a.addArray().add(e.getKey().topic()).add(e.getKey().partition()).add(e.getValue().offset());
        }
        emit(o);
    }
}
