/*
 * kwire's tests' Java peer with OpenTelemetry's instrumentation of Kafka's
 * client (KafkaTelemetry, opentelemetry-kafka-clients-2.6): its producer
 * and consumer, wrapped, trace through record headers (W3C traceparent),
 * and every span they finish is printed as a JSON line on stdout.
 *
 * One JSON command on stdin:
 *   {"mode": "produce", "config": {...}, "topic": "t", "count": N}
 *       sends N records to partition 0, each waited for;
 *   {"mode": "consume", "config": {...}, "topic": "t", "count": N}
 *       reads partition 0 from the beginning until N records came, iterating
 *       each poll's records (what makes the instrumentation's process spans).
 * Then: {"event": "span", "name", "kind", "trace", "span", "parent",
 * "links": [{"trace", "span"}], "attributes": {...}} per span, and
 * {"event": "done"}; {"event": "error", "error"} on failure.
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import io.opentelemetry.api.trace.propagation.W3CTraceContextPropagator;
import io.opentelemetry.context.propagation.ContextPropagators;
import io.opentelemetry.instrumentation.kafkaclients.v2_6.KafkaTelemetry;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.testing.exporter.InMemorySpanExporter;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.data.LinkData;
import io.opentelemetry.sdk.trace.data.SpanData;
import io.opentelemetry.sdk.trace.export.SimpleSpanProcessor;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TracingPeer {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static PrintStream out;

    public static void main(String[] args) throws Exception {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        JsonNode cmd = JSON.readTree(in.readLine());
        InMemorySpanExporter exporter = InMemorySpanExporter.create();
        SdkTracerProvider tracing = SdkTracerProvider.builder()
            .addSpanProcessor(SimpleSpanProcessor.create(exporter)).build();
        OpenTelemetrySdk otel = OpenTelemetrySdk.builder().setTracerProvider(tracing)
            .setPropagators(ContextPropagators.create(W3CTraceContextPropagator.getInstance())).build();
        KafkaTelemetry telemetry = KafkaTelemetry.builder(otel).setMessagingReceiveTelemetryEnabled(true).build();
        try {
            String topic = cmd.path("topic").asText();
            int count = cmd.path("count").asInt();
            if ("produce".equals(cmd.path("mode").asText())) {
                produce(telemetry, props(cmd), topic, count);
            } else {
                consume(telemetry, props(cmd), topic, count);
            }
            tracing.forceFlush();
            for (SpanData s : exporter.getFinishedSpanItems()) {
                emit(span(s));
            }
            ObjectNode done = JSON.createObjectNode();
            done.put("event", "done");
            emit(done);
        } catch (Exception e) {
            e.printStackTrace();
            ObjectNode o = JSON.createObjectNode();
            o.put("event", "error");
            o.put("error", e.toString());
            emit(o);
            out.flush();
            System.exit(1);
        }
        out.flush();
        System.exit(0);
    }

    private static void produce(KafkaTelemetry telemetry, Properties p, String topic, int count) throws Exception {
        try (Producer<byte[], byte[]> producer =
                 telemetry.wrap(new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer()))) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, ("java-" + i).getBytes(StandardCharsets.UTF_8)))
                    .get();
            }
        }
    }

    private static void consume(KafkaTelemetry telemetry, Properties p, String topic, int count) {
        try (Consumer<byte[], byte[]> consumer =
                 telemetry.wrap(new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer()))) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            int got = 0;
            long deadline = System.currentTimeMillis() + 60000;
            while (got < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    got++;
                }
            }
        }
    }

    private static ObjectNode span(SpanData s) {
        ObjectNode o = JSON.createObjectNode();
        o.put("event", "span");
        o.put("name", s.getName());
        o.put("kind", s.getKind().name());
        o.put("trace", s.getTraceId());
        o.put("span", s.getSpanId());
        o.put("parent", s.getParentSpanContext().isValid() ? s.getParentSpanId() : null);
        ArrayNode links = o.putArray("links");
        for (LinkData l : s.getLinks()) {
            ObjectNode link = links.addObject();
            link.put("trace", l.getSpanContext().getTraceId());
            link.put("span", l.getSpanContext().getSpanId());
        }
        ObjectNode attrs = o.putObject("attributes");
        s.getAttributes().forEach((k, v) -> attrs.put(k.getKey(), String.valueOf(v)));
        return o;
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

    private static synchronized void emit(ObjectNode o) {
        out.println(o.toString());
        out.flush();
    }
}
