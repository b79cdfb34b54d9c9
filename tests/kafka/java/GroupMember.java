// A Java consumer group member for kwire's live tests: Kafka's own client
// (kafka-clients from the broker's Maven assembly) with group.protocol=consumer.
// args: bootstrap group topic. Prints "assigned p,q", "revoked p,q" and
// "record <partition> <offset> <value>" lines; leaves the group (close) when a
// line comes on stdin, then prints "closed".
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

public class GroupMember {
    private static String parts(Collection<TopicPartition> ps) {
        return ps.stream().map(tp -> Integer.toString(tp.partition())).sorted().collect(Collectors.joining(","));
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("group.id", args[1]);
        p.put("group.protocol", "consumer");
        p.put("auto.offset.reset", "earliest");
        p.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        p.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        AtomicBoolean stop = new AtomicBoolean();
        Thread stdin = new Thread(() -> {
            try {
                new BufferedReader(new InputStreamReader(System.in)).readLine();
            } catch (Exception e) {
                // closed: stop as well
            }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(args[2]), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> ps) {
                    System.out.println("revoked " + parts(ps));
                }

                public void onPartitionsAssigned(Collection<TopicPartition> ps) {
                    System.out.println("assigned " + parts(ps));
                }
            });
            while (!stop.get()) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(100))) {
                    System.out.println("record " + r.partition() + " " + r.offset() + " "
                        + new String(r.value(), StandardCharsets.UTF_8));
                }
                System.out.flush();
            }
        }
        System.out.println("closed");
        System.out.flush();
    }
}
