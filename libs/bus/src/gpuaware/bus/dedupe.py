"""In-process idempotency: remember the ids of messages already handled.

JetStream de-duplicates *publishes* (same `Nats-Msg-Id` within the duplicate window), but a
consumer can still see a message twice: a redelivery after its ack was lost, or a producer that
re-sent after the window. Handlers whose effect must happen once (binding a pod) check a `Deduper`
first. It is a bounded LRU, so memory stays flat; durable idempotency across restarts belongs in
the owner's store (the allocation ledger), this only makes the common case cheap.

Mark an id *after* the effect succeeded (`remember`), check it before (`seen`): marking first
would turn a crash mid-handler into a lost message. `subscribe_durable(..., deduper=...)` does
exactly that around the handler.
"""

from __future__ import annotations

from collections import OrderedDict


class Deduper:
    """A bounded LRU set of message ids."""

    __slots__ = ("_ids", "capacity", "hits")

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.hits = 0
        self._ids: OrderedDict[str, None] = OrderedDict()

    def seen(self, msg_id: str) -> bool:
        """True when `msg_id` was remembered (and still fits); refreshes its recency."""
        if msg_id in self._ids:
            self._ids.move_to_end(msg_id)
            self.hits += 1
            return True
        return False

    def remember(self, msg_id: str) -> None:
        """Record `msg_id` as handled, evicting the least recently used id beyond capacity."""
        self._ids[msg_id] = None
        self._ids.move_to_end(msg_id)
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)

    def check_and_remember(self, msg_id: str) -> bool:
        """`seen(msg_id)`, remembering it if not: for effects that cannot fail after this point."""
        if self.seen(msg_id):
            return True
        self.remember(msg_id)
        return False

    def __contains__(self, msg_id: object) -> bool:
        return msg_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)
