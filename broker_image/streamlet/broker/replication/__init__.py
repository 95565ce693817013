"""A broker's part in replicated streams: each member's persisted state (``member``), the
leader's side (``leader``: feeds to followers, acks, the commit) and a follower's link to its
leader (``follower``). The decisions (commit rule, elections) are streamlet.replication's pure
functions; the wire commands are the RabbitMQ adapter's private keys (broker.rabbitmq.replication)."""
