"""The RabbitMQ Stream protocol in pieces that do no I/O (``machine``: the connection handshake
as a state table). The broker's adapter, which runs it, is streamlet.broker.rabbitmq."""
