"""Who does what: producers and consumers spread over the streams and the worker processes,
round-robin, as stream-perf-test spreads them over its streams. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Role:
    """One producer or consumer: its index among its kind, its stream, its slot in the
    shared counters."""

    kind: str  # "producer" | "consumer"
    index: int
    stream: str
    rate: float  # messages a second for a producer, 0: as fast as the window allows


@dataclass
class Worker:
    """One process and the roles it runs."""

    name: str
    roles: list[Role] = field(default_factory=list)


def stream_names(streams: list[str] | None, count: int, prefix: str = "perf-stream") -> list[str]:
    """--streams S1,S2 as given; else --stream-count N: ``prefix`` when N is 1, else
    ``prefix-1`` .. ``prefix-N``."""
    if streams:
        return streams
    if count == 1:
        return [prefix]
    return [f"{prefix}-{i}" for i in range(1, count + 1)]


def split_rate(rate: float, producers: int) -> list[float]:
    """--rate is the total over all producers: each gets an equal share (0: unlimited)."""
    if producers <= 0:
        return []
    return [rate / producers if rate > 0 else 0.0] * producers


def assign(streams: list[str], producers: int, consumers: int, processes: int,
           rate: float) -> list[Worker]:
    """Producer i publishes to stream i mod S, consumer j reads stream j mod S; each kind runs
    in ``processes`` worker processes of its own (fewer when it has fewer roles), so that
    publishing and consuming never share an event loop."""
    workers: list[Worker] = []
    rates = split_rate(rate, producers)
    for kind, n in (("producer", producers), ("consumer", consumers)):
        procs = [Worker(f"{kind}s-{k + 1}") for k in range(min(processes, n))]
        for i in range(n):
            procs[i % len(procs)].roles.append(Role(
                kind, i, streams[i % len(streams)], rates[i] if kind == "producer" else 0.0))
        workers.extend(procs)
    return workers
