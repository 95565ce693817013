"""The RabbitMQ Stream protocol's adapter: ``connection`` (dispatch), ``state`` (what a
connection holds; the core's session roles), and the handlers by area: ``handshake``,
``publishing``, ``consuming``, ``streams``, ``superstreams``. The sans-IO handshake table is
streamlet.rabbitmq.machine; the socket side, common to every protocol, broker.transport."""
