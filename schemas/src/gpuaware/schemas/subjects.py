"""Routing tokens: how a name the platform does not choose becomes one token of a subject.

Publishers append a cluster and a node after an event's versioned subject
(``telemetry.gpu.sampled.v1.<cluster>.<node>``) so consumers can filter by either. Kubernetes node
names may contain dots, and a dot would split the name into two tokens; spaces and the wildcards
``*`` and ``>`` are not allowed in a token at all. Every publisher and every filter derives the token
with ``subject_token``, so they agree on it.
"""

from __future__ import annotations

__all__ = ["subject_token"]

_NOT_IN_A_TOKEN = str.maketrans({".": "_", " ": "_", "*": "_", ">": "_"})


def subject_token(name: str) -> str:
    """``name`` as one subject token: dots, spaces and wildcards become ``_``; an empty name is ``_``."""
    return name.translate(_NOT_IN_A_TOKEN) or "_"
