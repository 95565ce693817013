"""streamlet: a stream broker that speaks the RabbitMQ Stream protocol."""

__version__ = "0.1.0"
