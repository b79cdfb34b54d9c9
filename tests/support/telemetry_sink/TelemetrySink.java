/*
 * A broker plugin for kwire's KIP-714 tests: Apache Kafka hands it every
 * client's PushTelemetry payload (as a metrics reporter that provides a
 * ClientTelemetryExporter), and it decodes each with OpenTelemetry's protobuf
 * classes (MetricsData) and appends it to the file named by the broker
 * property kwire.telemetry.file, one JSON line per push:
 *   {"client_instance_id", "terminating", "content_type",
 *    "resource": {attribute: value},
 *    "metrics": [{"name", "type": "gauge"|"sum", "monotonic", "temporality",
 *                 "points": [{"attributes": {...}, "value", "start", "time"}]}]}
 * A payload it cannot decode is written as {"client_instance_id", "error"}.
 */

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import io.opentelemetry.proto.common.v1.AnyValue;
import io.opentelemetry.proto.common.v1.KeyValue;
import io.opentelemetry.proto.metrics.v1.Metric;
import io.opentelemetry.proto.metrics.v1.MetricsData;
import io.opentelemetry.proto.metrics.v1.NumberDataPoint;
import io.opentelemetry.proto.metrics.v1.ResourceMetrics;
import io.opentelemetry.proto.metrics.v1.ScopeMetrics;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;

public final class TelemetrySink implements MetricsReporter, ClientTelemetryExporterProvider {
    private static final ObjectMapper JSON = new ObjectMapper();
    private Path file;

    @Override
    public void configure(Map<String, ?> configs) {
        file = Path.of(String.valueOf(configs.get("kwire.telemetry.file")));
    }

    @Override
    public void init(List<KafkaMetric> metrics) {
    }

    @Override
    public void metricChange(KafkaMetric metric) {
    }

    @Override
    public void metricRemoval(KafkaMetric metric) {
    }

    @Override
    public void close() {
    }

    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return this::export;
    }

    private synchronized void export(ClientTelemetryContext context, ClientTelemetryPayload payload) {
        ObjectNode o = JSON.createObjectNode();
        o.put("client_instance_id", payload.clientInstanceId().toString());
        o.put("terminating", payload.isTerminating());
        o.put("content_type", payload.contentType());
        o.put("push_interval_ms", context.pushIntervalMs());
        try {
            MetricsData data = MetricsData.parseFrom(payload.data().duplicate());
            ObjectNode resource = o.putObject("resource");
            ArrayNode metrics = o.putArray("metrics");
            for (ResourceMetrics rm : data.getResourceMetricsList()) {
                attributes(resource, rm.getResource().getAttributesList());
                for (ScopeMetrics sm : rm.getScopeMetricsList()) {
                    for (Metric m : sm.getMetricsList()) {
                        metrics.add(metric(m));
                    }
                }
            }
        } catch (Exception e) {
            o.put("error", e.toString());
        }
        try {
            Files.writeString(file, o.toString() + "\n", StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                              StandardOpenOption.APPEND);
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }

    private static ObjectNode metric(Metric m) {
        ObjectNode o = JSON.createObjectNode();
        o.put("name", m.getName());
        List<NumberDataPoint> points;
        if (m.hasSum()) {
            o.put("type", "sum");
            o.put("monotonic", m.getSum().getIsMonotonic());
            o.put("temporality", m.getSum().getAggregationTemporality().name());
            points = m.getSum().getDataPointsList();
        } else if (m.hasGauge()) {
            o.put("type", "gauge");
            points = m.getGauge().getDataPointsList();
        } else {
            o.put("type", m.getDataCase().name());
            points = List.of();
        }
        ArrayNode out = o.putArray("points");
        for (NumberDataPoint p : points) {
            ObjectNode point = out.addObject();
            attributes(point.putObject("attributes"), p.getAttributesList());
            point.put("value", p.hasAsDouble() ? p.getAsDouble() : (double) p.getAsInt());
            point.put("start", p.getStartTimeUnixNano());
            point.put("time", p.getTimeUnixNano());
        }
        return o;
    }

    private static void attributes(ObjectNode into, List<KeyValue> attributes) {
        for (KeyValue kv : attributes) {
            AnyValue v = kv.getValue();
            into.put(kv.getKey(), v.hasStringValue() ? v.getStringValue() : v.toString().trim());
        }
    }
}
