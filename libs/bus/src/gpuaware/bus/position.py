"""Where a JetStream delivery sits, read from its reply subject.

Why: nats-py's `Msg.metadata` parses every field of the reply subject into dataclasses and a
timezone-aware datetime on each call; the consumers and followers read that for every message they
handle, and at a thousand pods a second the parse alone was a few per cent of placement's CPU. The
common layout `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>` is split here
once; any other layout (domains, account hashes) falls back to nats-py's parser.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Position", "position"]


class Position(NamedTuple):
    stream: str
    consumer: str
    delivered: int
    """1 on the first delivery, 2 on the first redelivery, ..."""
    stream_seq: int
    pending: int
    """messages after this one in the consumer's view when it was delivered"""


def position(msg: Any) -> Position:
    """The delivery's stream, consumer, delivery count, stream sequence and pending count."""
    reply = msg.reply
    if reply:
        tokens = reply.split(".")
        if len(tokens) == 9 and tokens[0] == "$JS":
            return Position(tokens[2], tokens[3], int(tokens[4]), int(tokens[5]), int(tokens[8]))
    meta = msg.metadata
    return Position(meta.stream, meta.consumer, meta.num_delivered, meta.sequence.stream, meta.num_pending)
