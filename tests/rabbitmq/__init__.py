"""The RabbitMQ Stream protocol's broker side, in memory."""
