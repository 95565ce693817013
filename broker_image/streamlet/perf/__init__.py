"""`streamlet perf`: a load tool in the spirit of RabbitMQ's stream-perf-test.

Producers and consumers run in worker processes (:mod:`.worker`) speaking only the RabbitMQ
Stream protocol, so the same command measures streamlet and RabbitMQ alike; the command's own
process (:mod:`.run`) releases them together, prints live rates once a second and sums up.
"""
