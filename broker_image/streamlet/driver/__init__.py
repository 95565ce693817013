"""The I/O that carries out the pure replication decisions (streamlet.replication) against the
member brokers, for any placement driver: the local cluster's (streamlet.cluster) and the
Kubernetes operator's."""
