"""The broker side of the RabbitMQ Stream protocol, in pieces that do no I/O (``machine``: the
connection handshake as a state table). The asyncio adapter is still streamlet.broker.connection."""
