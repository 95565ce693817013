"""`make soak`: the long hardening runs against one real broker process.

Phases (each a module with one job): ``fuzz`` (mutated frames over many short connections
while a bystander publishes and consumes), ``hold`` (10,000 connections open at once) and
``kills`` (kill -9 under load, every confirmed message checked). ``__main__`` runs them in that
order and prints a summary; see docs/reliability.md.
"""
