"""The RabbitMQ Stream protocol's connection handshake, in pieces that do no I/O: ``machine``,
the server's side as a state table (its asyncio adapter is still streamlet.broker.connection);
``client``, the client's side, which every piece of code that connects as a client drives."""
