"""Tombstones of closed pod attempts in memory allocated once, so placement's footprint is flat.

The ledger remembers, for every pod attempt it closed (finished, rolled back, evicted), the highest
closed attempt, so a late or redelivered event about it is recognised as stale instead of
reserving capacity for a pod that is gone. It keeps the most recent `capacity` of them, in memory
allocated once: a structure that grows as pods close looks like a leak to anyone watching the
service's footprint, and reaches its cap only after hours.

`Tombstones` allocates its whole table up front (about 60 bytes per unit of capacity: 12 MB for the
default 200,000) and never grows: an open-addressing hash table with linear probing over fixed
`array`s, keyed by the uid's 64-bit hash, with a ring of insertion order for first-in-first-out
eviction. Two uids with the same 64-bit hash would share a tombstone; with 200,000 live entries the
chance that any lookup in a year at 10,000 lookups/s meets such a collision is about 1e-5.
"""

from __future__ import annotations

from array import array

__all__ = ["Tombstones"]

_EMPTY = 0


def _key(uid: str) -> int:
    h = hash(uid)
    return h if h != _EMPTY else 1


class Tombstones:
    """uid -> highest closed attempt, for the `capacity` most recently closed uids (FIFO eviction;
    closing a uid again makes it the most recent)."""

    __slots__ = ("_attempt", "_count", "_keys", "_mask", "_next", "_pos", "_ring", "capacity")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"tombstone capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        size = 1 << max(4, (2 * capacity - 1).bit_length())  # load factor <= 0.5
        self._mask = size - 1
        self._keys = array("q", bytes(8 * size))
        self._attempt = array("i", bytes(4 * size))
        self._pos = array("q", bytes(8 * size))
        """ring index of the slot's current insertion (a re-closed uid leaves a stale ring entry)"""
        self._ring = array("q", bytes(8 * capacity))
        self._next = 0
        """insertions so far; the ring position of the next one is `_next % capacity`"""
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, str) and self._keys[self._slot(_key(uid))] != _EMPTY

    def get(self, uid: str, default: int | None = None) -> int | None:
        i = self._slot(_key(uid))
        return self._attempt[i] if self._keys[i] != _EMPTY else default

    def close(self, uid: str, attempt: int) -> None:
        """Record that `uid`'s attempts up to `attempt` are over (keeps the highest seen)."""
        key = _key(uid)
        i = self._slot(key)
        if self._keys[i] != _EMPTY:
            attempt = max(attempt, self._attempt[i])
            self._delete(i)
            self._count -= 1
            i = self._slot(key)
        if self._next >= self.capacity:
            self._evict(self._next - self.capacity)
            i = self._slot(key)  # the eviction may have moved entries
        ring = self._next % self.capacity
        self._keys[i], self._attempt[i], self._pos[i] = key, attempt, self._next
        self._ring[ring] = key
        self._next += 1
        self._count += 1

    # -- the table ----------------------------------------------------------------------------------

    def _slot(self, key: int) -> int:
        """The slot holding `key`, or the empty slot where it would go."""
        keys, mask = self._keys, self._mask
        i = key & mask
        while keys[i] != _EMPTY and keys[i] != key:
            i = (i + 1) & mask
        return i

    def _evict(self, insertion: int) -> None:
        """Drop the entry inserted as number `insertion`, unless it was closed again since."""
        key = self._ring[insertion % self.capacity]
        if key == _EMPTY:
            return
        i = self._slot(key)
        if self._keys[i] != _EMPTY and self._pos[i] == insertion:
            self._delete(i)
            self._count -= 1

    def _delete(self, i: int) -> None:
        """Empty slot `i`, shifting later members of its probe run back (no deletion markers)."""
        keys, attempt, pos, mask = self._keys, self._attempt, self._pos, self._mask
        j = i
        while True:
            keys[i] = _EMPTY
            while True:
                j = (j + 1) & mask
                k = keys[j]
                if k == _EMPTY:
                    return
                home = k & mask
                # the entry at j may stay when its home lies cyclically in (i, j]
                if (i < home <= j) if i <= j else (home > i or home <= j):
                    continue
                break
            keys[i], attempt[i], pos[i] = k, attempt[j], pos[j]
            i = j
