"""The streamlet operator: Broker and Stream custom resources kept as declared (kopf)."""
