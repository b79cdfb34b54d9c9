// Kafka's own client-side partition assignors run on given inputs, for
// kwire's assignor tests to compare with (tests/support/java_peer.py
// compiles and runs it). One JSON line on stdin per case:
//
//   {"assignor": "range" | "cooperative-sticky" | "roundrobin",
//    "brokers": {"<node id>": rack | null, ...},
//    "topics": {"<topic>": [[replica node ids of partition 0], [... of 1], ...], ...},
//    "members": {"<member id>": {"topics": [t, ...], "rack": r | null, "instance_id": i | null,
//                                "owned": [[t, p], ...], "generation": g}, ...}}
//
// One JSON line on stdout for each: {"assignment": {"<member id>": [[t, p], ...], ...}}
// (each member's partitions sorted by topic, then partition).

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

public final class AssignorPeer {
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (!line.isBlank()) {
                System.out.println(JSON.writeValueAsString(assign(JSON.readTree(line))));
            }
        }
    }

    private static ObjectNode assign(JsonNode cmd) {
        ConsumerPartitionAssignor assignor = assignor(cmd.path("assignor").asText());
        Map<String, List<TopicPartition>> got = new HashMap<>();
        assignor.assign(cluster(cmd), new GroupSubscription(subscriptions(cmd.path("members"))))
                .groupAssignment().forEach((member, a) -> got.put(member, new ArrayList<>(a.partitions())));
        ObjectNode result = JSON.createObjectNode();
        ObjectNode assignment = result.putObject("assignment");
        got.forEach((member, tps) -> {
            tps.sort(Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition));
            ArrayNode a = assignment.putArray(member);
            tps.forEach(tp -> a.addArray().add(tp.topic()).add(tp.partition()));
        });
        return result;
    }

    private static ConsumerPartitionAssignor assignor(String name) {
        switch (name) {
            case "range": return new RangeAssignor();
            case "roundrobin": return new RoundRobinAssignor();
            case "cooperative-sticky": return new CooperativeStickyAssignor();
            default: throw new IllegalArgumentException("unknown assignor " + name);
        }
    }

    private static Cluster cluster(JsonNode cmd) {
        Map<Integer, Node> nodes = new HashMap<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = cmd.path("brokers").fields(); it.hasNext();) {
            Map.Entry<String, JsonNode> e = it.next();
            int id = Integer.parseInt(e.getKey());
            nodes.put(id, new Node(id, "broker" + id, 9092, e.getValue().isNull() ? null : e.getValue().asText()));
        }
        List<PartitionInfo> partitions = new ArrayList<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = cmd.path("topics").fields(); it.hasNext();) {
            Map.Entry<String, JsonNode> e = it.next();
            int p = 0;
            for (JsonNode replicaIds : e.getValue()) {
                List<Node> replicas = new ArrayList<>();
                replicaIds.forEach(r -> replicas.add(nodes.get(r.asInt())));
                Node[] rs = replicas.toArray(new Node[0]);
                partitions.add(new PartitionInfo(e.getKey(), p++, rs.length > 0 ? rs[0] : null, rs, rs));
            }
        }
        return new Cluster("kwire-test", nodes.values(), partitions, Collections.emptySet(), Collections.emptySet());
    }

    private static Map<String, Subscription> subscriptions(JsonNode members) {
        Map<String, Subscription> subs = new HashMap<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = members.fields(); it.hasNext();) {
            Map.Entry<String, JsonNode> e = it.next();
            JsonNode m = e.getValue();
            List<String> topics = new ArrayList<>();
            m.path("topics").forEach(t -> topics.add(t.asText()));
            List<TopicPartition> owned = new ArrayList<>();
            m.path("owned").forEach(tp -> owned.add(new TopicPartition(tp.get(0).asText(), tp.get(1).asInt())));
            Optional<String> rack = m.path("rack").isTextual() ? Optional.of(m.path("rack").asText()) : Optional.empty();
            Subscription s = new Subscription(topics, null, owned, m.path("generation").asInt(-1), rack);
            if (m.path("instance_id").isTextual()) {
                s.setGroupInstanceId(Optional.of(m.path("instance_id").asText()));
            }
            subs.put(e.getKey(), s);
        }
        return subs;
    }
}
