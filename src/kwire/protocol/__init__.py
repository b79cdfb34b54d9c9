"""The Kafka wire protocol: request and response messages of every client
API (generated from Apache Kafka's JSON definitions), frame headers, version
negotiation, and the Kafka 0.7 requests."""
