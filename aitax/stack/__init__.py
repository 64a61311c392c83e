"""The local stack: 3 or more KRaft Kafka brokers, Elasticsearch and Prometheus as processes on this machine."""
