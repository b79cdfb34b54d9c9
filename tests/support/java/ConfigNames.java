import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;

import java.util.Set;
import java.util.TreeSet;

/** Prints the Java client's configuration names, as JSON: {"producer": [...], "consumer": [...], "admin": [...]}. */
public class ConfigNames {
    public static void main(String[] args) {
        System.out.println("{\"producer\": " + json(ProducerConfig.configNames())
            + ", \"consumer\": " + json(ConsumerConfig.configNames())
            + ", \"admin\": " + json(AdminClientConfig.configNames()) + "}");
    }

    private static String json(Set<String> names) {
        StringBuilder out = new StringBuilder("[");
        for (String name : new TreeSet<>(names)) {
            if (out.length() > 1) out.append(", ");
            out.append('"').append(name).append('"');
        }
        return out.append(']').toString();
    }
}
