"""Routing tokens: how a name the platform does not choose becomes one token of a subject, or part of a
JetStream consumer name.

Publishers append names after an event's versioned subject (``telemetry.gpu.sampled.v1.<cluster>.<node>``)
so consumers can filter by them, and some durable consumers are named after their cluster
(``placement-<cluster>``). Names come from outside: Kubernetes node names are DNS subdomains with dots
(``ip-10-0-1-2.ec2.internal``), clusters are whatever an operator typed (``prod.eu-west-1``), GPU models
have spaces. In a subject a dot splits a name into two tokens, whitespace is not allowed and ``*`` /
``>`` are wildcards; a consumer name may hold none of ``. * >``, whitespace, ``/`` or ``\\``. Every
publisher, every filter and every consumer name therefore derives the token with this one rule, so they
agree on it, and distinct names never share a subject.

The rule (``subject_token``), byte by byte over the name's UTF-8:

* ``A-Z a-z 0-9 -`` stay as they are;
* ``.`` becomes ``_`` (the common case, a DNS name, stays readable: ``ip-10-0-1-2_ec2_internal``);
* every other byte, ``_`` and ``%`` included, becomes ``%XX`` (two upper-case hex digits), as in a URL;
* the empty name is the token ``%``.

A token therefore holds only ``A-Z a-z 0-9 - _ %``, which NATS accepts in subjects and in consumer
names, and the mapping is reversible: ``name_from_token`` gives the name back. A token is at most
``TOKEN_MAX`` characters, so every Kubernetes name (a DNS-1123 subdomain is at most 253 characters from
``a-z 0-9 . -``, a label value at most 63) stays reversible. A longer escaped name is *hashed*: the first
characters of its escaped form, then ``%-`` and the 128-bit BLAKE2b of the whole escaped form in hex. ``%-`` never
occurs in an escaped token (every ``%`` there is followed by two hex digits), so a hashed token cannot
equal an escaped one; its name cannot be recovered (``name_from_token`` raises ``ValueError``).

``subject_token`` returns a ``SubjectToken`` (a ``str``); given one, it returns it unchanged, as an
HTML escaper leaves already-escaped markup alone. So ``Channel.at(cluster)`` and
``Channel.at(subject_token(cluster))`` build the same subject, and a token is never escaped twice.

Consumer names (``consumer_name``): a fixed prefix, ``-``, and the names' tokens joined with ``+`` (a
character no token holds, so different lists of names give different consumer names), hashed the same
way past ``CONSUMER_NAME_MAX`` characters (JetStream's limit). Nothing reads a name back from a consumer
name.
"""

from __future__ import annotations

import functools
import hashlib
import re

__all__ = [
    "CONSUMER_NAME_MAX",
    "TOKEN_MAX",
    "SubjectToken",
    "consumer_name",
    "is_consumer_name",
    "is_subject_token",
    "name_from_token",
    "subject_token",
]

TOKEN_MAX = 253
"""the longest token; an escaped name longer than this is hashed (no Kubernetes name is)"""
CONSUMER_NAME_MAX = 255
"""JetStream's longest stream or consumer name"""

_KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_DOT, _DOT_TOKEN = ord("."), "_"
_ESCAPE = "%"
_EMPTY = "%"
_HASHED = "%-"
_HASH_HEX = 32
_ESCAPED = re.compile(r"%[0-9A-F]{2}")
_TOKEN_CHARS = re.compile(r"^[A-Za-z0-9_%-]+$")
_NOT_IN_A_CONSUMER_NAME = re.compile(r"[.*>/\\\s]")


class SubjectToken(str):
    """A name already made into a token by ``subject_token`` (which returns it unchanged)."""

    __slots__ = ()


def _escape(name: str) -> str:
    out = []
    for byte in name.encode("utf-8", "surrogatepass"):
        if byte in _KEPT:
            out.append(chr(byte))
        elif byte == _DOT:
            out.append(_DOT_TOKEN)
        else:
            out.append(f"{_ESCAPE}{byte:02X}")
    return "".join(out)


def _hashed(escaped: str, limit: int) -> str:
    """``escaped`` cut to fit ``limit`` with its digest: its head (never half an escape), ``%-``, the hash."""
    digest = hashlib.blake2b(escaped.encode(), digest_size=_HASH_HEX // 2).hexdigest()
    head = escaped[: limit - len(_HASHED) - _HASH_HEX]
    cut = head.rfind(_ESCAPE, max(0, len(head) - 2))
    if cut >= 0:  # a '%' among the last two characters starts an escape the cut would split
        head = head[:cut]
    return f"{head}{_HASHED}{digest}"


def subject_token(name: str) -> SubjectToken:
    """``name`` as exactly one subject token, by the rule of the module docstring (reversible up to
    ``TOKEN_MAX`` characters, hashed past it). A ``SubjectToken`` is returned as it is."""
    if isinstance(name, SubjectToken):
        return name
    return _token_of(name)


@functools.lru_cache(maxsize=4096)
def _token_of(name: str) -> SubjectToken:
    """The token of a name (a plain ``str``); cached: publishers ask for the same few names per message."""
    if not name:
        return SubjectToken(_EMPTY)
    escaped = _escape(name)
    return SubjectToken(escaped if len(escaped) <= TOKEN_MAX else _hashed(escaped, TOKEN_MAX))


def name_from_token(token: str) -> str:
    """The name ``subject_token`` made ``token`` from. Raises ``ValueError`` for a hashed token (its name
    cannot be recovered) and for anything ``subject_token`` never returns."""
    if token == _EMPTY:
        return ""
    if not token:
        raise ValueError("invalid subject token '': a token is never empty")
    if _HASHED in token:
        raise ValueError(f"subject token {token!r} is hashed: the name it stands for cannot be recovered")
    out = bytearray()
    i = 0
    while i < len(token):
        c = token[i]
        if c == _ESCAPE:
            if not _ESCAPED.match(token, i):
                raise ValueError(f"invalid subject token {token!r}: '%' must be followed by two hex digits")
            out.append(int(token[i + 1:i + 3], 16))
            i += 3
            continue
        if c == _DOT_TOKEN:
            out.append(_DOT)
        elif c.isascii() and ord(c) in _KEPT:
            out.append(ord(c))
        else:
            raise ValueError(f"invalid subject token {token!r}: {c!r} is not in a token")
        i += 1
    try:
        name = out.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise ValueError(f"invalid subject token {token!r}: not UTF-8 ({exc.reason})") from None
    if _escape(name) != token:  # e.g. '%41' for 'A': one name, one token
        raise ValueError(f"invalid subject token {token!r}: not the token of {name!r}")
    return name


def is_subject_token(token: str) -> bool:
    """Whether ``token`` is one token of a subject as this rule makes them (never a wildcard, no dot,
    no whitespace, only ``A-Z a-z 0-9 - _ %``)."""
    return 0 < len(token) <= TOKEN_MAX and bool(_TOKEN_CHARS.match(token))


def is_consumer_name(name: str) -> bool:
    """Whether JetStream accepts ``name`` as a stream or consumer name (no ``. * > / \\`` or whitespace,
    1 to ``CONSUMER_NAME_MAX`` characters)."""
    return 0 < len(name) <= CONSUMER_NAME_MAX and not _NOT_IN_A_CONSUMER_NAME.search(name)


def consumer_name(prefix: str, *names: str) -> str:
    """A JetStream consumer name for ``names``: ``<prefix>-<token>+<token>...`` (just ``prefix`` without
    names), hashed past ``CONSUMER_NAME_MAX``. ``prefix`` is a fixed or configured consumer name; it is
    checked, not escaped, and a ``ValueError`` says what is wrong with it."""
    if not is_consumer_name(prefix):
        raise ValueError(f"{prefix!r} cannot start a consumer name: it must be 1 to {CONSUMER_NAME_MAX} "
                         "characters without '.', '*', '>', '/', '\\' or whitespace")
    if not names:
        return prefix
    full = f"{prefix}-" + "+".join(subject_token(n) for n in names)
    return full if len(full) <= CONSUMER_NAME_MAX else _hashed(full, CONSUMER_NAME_MAX)
