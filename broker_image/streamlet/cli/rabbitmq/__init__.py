"""The client commands over the RabbitMQ Stream protocol (streamlet.client): the connection
and its failures in words (session.py), produce's and consume's loops, `streams` and its info,
ping's probe of what answers on a port, hints and a refused Create's reason. Imported when a
command runs, never to parse."""
