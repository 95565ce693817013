"""The broker subscribed to a client's publisher (publisher string mode=append): the elements it
receives are appended to a stream, and demand is the back-pressure and the confirmation.

The broker asks for ``window`` elements first; each element is one message (a simple entry),
and the elements of one read are appended through a core Publisher as one batch; the broker
gives back as much demand as the core confirms (durable: written, or on a majority of a
replicated stream). So a client knows its first ``granted - window`` elements are durable.
After the client's onComplete, the broker's onComplete on the client's own subscription (same
id) says every element is durable.
"""

from __future__ import annotations

import struct

from ...core.batch import PublishBatch
from ...core.streams import Publisher, Stream
from ...storage.entries import consecutive_ids, join_simple

_U32 = struct.Struct(">I")


class Violation(Exception):
    """The client's publisher broke the protocol (more elements than demand, a packed frame that
    is not count * elementSize, parts of two elements at once, an element past the limit)."""


class Inbound:
    __slots__ = ("completing", "confirmed", "element_size", "granted", "held", "id",
                 "max_element", "next_id", "part", "publisher", "received", "stream", "waiting",
                 "window")

    def __init__(self, sub_id: int, stream: Stream, publisher: Publisher,
                 window: int, max_element: int) -> None:
        self.id = sub_id
        self.stream = stream
        self.publisher = publisher
        self.window = window
        self.max_element = max_element
        self.element_size = 0  # from the client's subscribed
        self.granted = window  # demand given in all
        self.received = 0
        self.confirmed = 0
        self.next_id = 0  # publishing ids, one per element
        #: an element arriving in parts: (its element id, the parts, their bytes)
        self.part: tuple[int, list[bytes], int] | None = None
        self.completing = False  # the client's publisher sent onComplete
        #: elements received and not appended yet (``flush`` appends them): their entries
        #: joined, and how many
        self.held = bytearray()
        self.waiting = 0

    def take(self, element: memoryview) -> bool:
        """Hold one onNext's element for the next ``flush``; False (nothing done) when it
        breaks a rule: ``elements`` then says which."""
        n = len(element)
        if self.completing or self.received >= self.granted or n > self.max_element:
            return False
        self.received += 1
        self.waiting += 1
        held = self.held
        held += n.to_bytes(4, "big")
        held += element
        return True

    def take_entries(self, entries: bytes, n: int) -> None:
        """Hold ``n`` elements more, as joined simple entries (cut within the rules)."""
        self.received += n
        self.waiting += n
        self.held += entries

    def flush(self) -> None:
        """Append the elements held, as one batch of one publisher call."""
        n = self.waiting
        if not n:
            return
        data = bytes(self.held)
        self.held.clear()
        self.waiting = 0
        first = self.next_id + 1
        self.next_id += n
        self.stream.publish(self.publisher, PublishBatch(
            self.publisher.id, n, consecutive_ids(first, n), data, n, first, self.next_id,
            True, simple=True))

    @property
    def durable(self) -> bool:
        """Everything received is confirmed."""
        return self.confirmed == self.received and self.part is None

    def elements(self, bodies: list[bytes]) -> None:
        """Hold ``bodies`` (one frame's worth) for the next ``flush``."""
        self._admit(len(bodies), max(map(len, bodies), default=0))
        self.received += len(bodies)
        self.waiting += len(bodies)
        held = self.held
        for b in bodies:
            held += _U32.pack(len(b))
            held += b

    def packed(self, count: int, data: bytes) -> None:
        size = self.element_size
        if not size or count * size != len(data) or count == 0:
            raise Violation(f"onNextPacked of {count} elements in {len(data)} bytes with "
                            f"elementSize {size}")
        self._admit(count, size)
        self.take_entries(join_simple(data, [size] * count), count)  # one C call

    def _admit(self, n: int, largest: int) -> None:
        """Raise Violation unless ``n`` more elements, none past ``largest`` bytes, may come."""
        if self.completing:
            raise Violation("an element after onComplete")
        if self.received + n > self.granted:
            raise Violation(f"{self.received + n} elements sent, {self.granted} requested")
        if largest > self.max_element:
            raise Violation(f"an element of {largest} bytes (at most {self.max_element})")

    def add_part(self, element: int, data: bytes, last: bool) -> None:
        held = self.part
        if held is not None and held[0] != element:
            raise Violation(f"a part of element {element} while element {held[0]} is incomplete")
        parts, size = (held[1], held[2]) if held is not None else ([], 0)
        size += len(data)
        if size > self.max_element:
            raise Violation(f"an element of more than {self.max_element} bytes")
        parts.append(data)
        self.part = (element, parts, size)
        if last:
            self.part = None
            self.elements([b"".join(parts)])

    def confirm(self, n: int) -> int:
        """``n`` more elements are durable: the demand to give back (none once completing)."""
        self.confirmed += n
        if self.completing:
            return 0
        self.granted += n
        return n
