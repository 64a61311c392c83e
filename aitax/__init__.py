"""aitax: measure the AI tax of a Kafka-based Face Recognition pipeline."""

__version__ = "0.1.0"
