"""Policies, as RabbitMQ's: the retention a stream runs with, changed live (model.py: the pure
rules; store.py: this broker's set, kept, applied and sent to its peers)."""
