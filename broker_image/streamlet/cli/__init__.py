"""The `streamlet` command: main.py builds the parser from one module per command (serve.py,
produce.py, consume.py, streams.py, lists.py, ping.py, perf.py, cluster.py: each its subparser,
its checks and its run) on parser.py's shared options, and dispatches; the client commands'
work is in rabbitmq/ (the RabbitMQ Stream protocol) and protocols/ (--protocol mega|rsio|sbp,
one table row each), their shared parts beside them (signals, output, input)."""
