"""The RabbitMQ Stream protocol's connection handshake, in pieces that do no I/O: ``machine``,
the server's side as a state table (the broker's adapter, streamlet.broker.rabbitmq, runs it);
``client``, the client's side, which every piece of code that connects as a client drives."""
