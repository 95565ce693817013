"""Side-by-side benchmarks of streamlet and RabbitMQ's stream plugin.

Run from the repository root: ``python -m bench.run`` (``--help`` for options).
"""
